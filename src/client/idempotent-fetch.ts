import { ATTEMPT_HEADER } from '../core/attempt-header.js';
import {
  activeSpanSource,
  aFunction,
  checkOptions,
  headerName,
  nonEmptyString,
  retryOptions,
} from './client-options.js';
import { operationTypeOf, passesArgument, rootKeyCoverage } from './graphql-document.js';
import { keyHeaderValue } from './key-header.js';
import { newKey, randomKey } from './new-key.js';
import { type ActiveSpanSource, markResend } from './resend-count.js';
import {
  type AttemptFailure,
  LOST_ANSWER_STATUSES,
  RETRYABLE_CODES,
  RETRYABLE_STATUSES,
  type RetryOptions,
  retryDelay,
  sleep,
} from './retry-policy.js';

/** The `fetch` signature GraphQL clients accept (urql, Apollo, graphql-request, plain calls). */
export type FetchFunction = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** Options of `idempotentFetch`. */
export interface IdempotentFetchOptions {
  /**
   * The header the key travels in. A request that already has it keeps its own key.
   * @default 'Idempotency-Key'
   */
  header?: string | undefined;
  /**
   * The argument of field-level keys (as the server's `useIdempotency` names it). A mutation whose
   * root fields all give it a value (not `null`, nor a variable left unset or null) carries its own
   * keys: it gets no header (the server would refuse a header that disagrees with them), and its
   * retries resend those same keys. A mutation where only some root fields pass one is sent once
   * and never retried: another attempt would run the fields without a key again.
   * @default 'idempotencyKey'
   */
  argumentName?: string | undefined;
  /**
   * Makes the key of a new logical mutation: a non-empty string, new on each call. Pass one where
   * `crypto.randomUUID` is missing (a page served over plain http, React Native).
   * @default () => crypto.randomUUID()
   */
  generateKey?: (() => string) | undefined;
  /** How failed attempts are retried. @default { attempts: 5, baseDelayMs: 250, maxDelayMs: 10_000 } */
  retry?: RetryOptions | undefined;
  /**
   * `trace` from `@opentelemetry/api`: each retry sets `http.request.resend_count` on the span
   * active when it is sent. @default undefined (nothing recorded)
   */
  trace?: ActiveSpanSource | undefined;
}

/**
 * Wraps `fetch` for GraphQL clients. A POST whose JSON body runs a mutation gets an idempotency
 * key (unless it already has the header, or passes field-level keys as arguments), and is retried
 * with that same key on network failures,
 * 409 (key still in progress, honouring `Retry-After`), 503 (store unavailable) and a proxy's 408,
 * 502, 503 or 504 (a body that is no GraphQL response: the server's answer was lost), with jittered
 * exponential backoff; the request's `signal` stops the retries. A 409 or 503 whose GraphQL errors
 * carry other codes than the idempotency layer's is the application's own answer: returned as is,
 * and so is any other GraphQL response (a resolver's 502). The key a mutation went out with is on
 * its answer (the header, unless the answer comes in parts) and on a thrown error (`idempotencyKey`),
 * to call again with after a give-up.
 * Every other request (queries, subscriptions, batched arrays, persisted queries without their
 * text, multipart uploads) is passed to `fetch` untouched.
 *
 * Each send of a key the wrapper made carries `Idempotency-Attempt` (1, then 2, 3… on retries): the
 * server claims a first attempt's key without reading its record first, one round trip less.
 *
 * A retry sends the whole operation again, so only a mutation whose every root field is covered
 * by a key is retried: by the header (an operation-level key, which covers them all) or by a key
 * argument on each root field. A mutation mixing root fields with and without a key argument is
 * sent once.
 */
export function idempotentFetch(
  fetch: FetchFunction = globalThis.fetch,
  options: IdempotentFetchOptions = {},
): FetchFunction {
  checkOptions('idempotentFetch', options, {
    header: headerName,
    argumentName: nonEmptyString,
    generateKey: aFunction,
    retry: retryOptions,
    trace: activeSpanSource,
  });
  const {
    header = 'Idempotency-Key',
    argumentName = 'idempotencyKey',
    generateKey = randomKey,
    retry,
    trace,
  } = options;

  /**
   * Adds a key header to a mutation that carries no field-level key at its root, since the header
   * then covers the whole operation. Returns whether the mutation's root fields are all covered by
   * a key: with the header, or each with a key argument of its own.
   */
  const keyMutation = (mutation: Mutation, headers: Headers): boolean => {
    const { query, operationName, variables } = mutation;
    const coverage = rootKeyCoverage(query, operationName, argumentName, variables);
    // A document this client cannot read: the header is safe if no key is passed anywhere.
    const keyed = coverage?.keyed ?? (passesArgument(query, argumentName, variables) ? undefined : 0);
    if (keyed === 0) {
      headers.set(header, keyHeaderValue(newKey(generateKey)));
      return true;
    }
    // Some root fields pass keys: a header would have to agree with each, so none is added.
    return coverage !== undefined && keyed === coverage.fields;
  };

  return async (input, init) => {
    const request = input instanceof Request ? input : undefined;
    const method = (init?.method ?? request?.method ?? 'GET').toUpperCase();
    if (method !== 'POST') return fetch(input, init);
    const body = await bodyText(init, request);
    const mutation = body === undefined ? undefined : mutationOf(body);
    if (mutation === undefined) return fetch(input, init);

    const headers = new Headers(init?.headers ?? request?.headers);
    // `fetch` takes a Blob body's type as its Content-Type; the text sent in its place has none.
    const blobType = init?.body instanceof Blob ? init.body.type : '';
    if (blobType && !headers.has('content-type')) headers.set('content-type', blobType);
    const own = headers.has(header);
    const retried = own || keyMutation(mutation, headers);
    // The sends of a key this wrapper made are numbered, so the server can skip a read on the
    // first; a caller's key (header or arguments) may have been sent before.
    const counted = !own && headers.has(header);
    const signal = init?.signal ?? request?.signal;
    // The body is sent again on every attempt, so it travels as the text read above; each attempt
    // gets headers of its own (they differ in their attempt number).
    const send = (attempt: number) => {
      const sent = new Headers(headers);
      if (counted) sent.set(ATTEMPT_HEADER, String(attempt));
      return request && !init
        ? fetch(new Request(request, { headers: sent, body }))
        : fetch(input, { ...init, method, headers: sent, body });
    };

    // An operation whose root fields are not all covered by a key is sent once: another attempt
    // could run the uncovered ones again.
    const policy = retried ? retry : { ...retry, attempts: 1 };
    // The key the mutation went out with: the answer carries it as a header, a thrown error as
    // `idempotencyKey`, so the caller can call again with it after a give-up whose outcome is unknown.
    const key = headers.get(header) ?? undefined;
    try {
      for (let attempt = 1; ; attempt++) {
        let response: Response;
        let delay: number | undefined;
        /** The answer is this attempt's, to be returned whatever happens as its body is read. */
        let final = false;
        markResend(trace, attempt - 1);
        try {
          response = await send(attempt);
          const failure: AttemptFailure = {
            kind: 'status',
            status: response.status,
            retryAfter: response.headers.get('retry-after'),
            ...(RETRYABLE_STATUSES.has(response.status) || LOST_ANSWER_STATUSES.has(response.status)
              ? await whoAnswered(response)
              : {}),
          };
          delay = signal?.aborted ? undefined : retryDelay(failure, attempt, policy);
          // A retried call's answer is read whole here: a connection lost in the middle of a success's
          // body loses the answer as one lost before it does, and the next attempt replays it. In the
          // middle of a failure's, whose status already said not to try again (a 500
          // IDEMPOTENCY_OUTCOME_UNKNOWN, a 422), the read's error is the answer.
          if (delay === undefined) {
            if (!retried) return response;
            final = !response.ok;
            return await readWhole(response, key === undefined ? undefined : [header, key]);
          }
        } catch (error) {
          // The call's own signal ends the retries; an attempt's timeout inside `fetch` does not.
          const networkDelay =
            final || signal?.aborted || isAbort(error) ? undefined : retryDelay(NETWORK, attempt, policy);
          if (networkDelay === undefined) throw error;
          await sleep(networkDelay, signal);
          continue;
        }
        await response.body?.cancel().catch(() => undefined);
        await sleep(delay, signal);
      }
    } catch (error) {
      // Not on the abort's reason: it is the caller's own, and may be every aborted call's.
      if (key !== undefined && error instanceof Object && error !== signal?.reason)
        Reflect.set(error, 'idempotencyKey', key);
      throw error;
    }
  };
}

const NETWORK: AttemptFailure = { kind: 'network' };

/** The body as text, when it can be read without consuming it; `undefined` otherwise. */
async function bodyText(
  init: RequestInit | undefined,
  request: Request | undefined,
): Promise<string | undefined> {
  const body = init?.body;
  if (typeof body === 'string') return body;
  if (body instanceof Uint8Array || body instanceof ArrayBuffer) return new TextDecoder().decode(body);
  if (body instanceof Blob) return body.text();
  // Streams, form data (multipart uploads) and the like cannot be read twice.
  if (body !== undefined && body !== null) return undefined;
  if (!request?.body) return undefined;
  // A Request's body is read only when it is JSON, as a GraphQL operation's is: any other (an upload,
  // perhaps a stream still open) is passed on unread.
  const type = new Headers(init?.headers ?? request.headers).get('content-type') ?? '';
  return /\bjson\b/i.test(type) ? request.clone().text() : undefined;
}

/** A GraphQL request running a mutation. */
interface Mutation {
  query: string;
  operationName: string | undefined;
  variables: Record<string, unknown>;
}

/** The document and variables of a body that is one GraphQL operation, over JSON, running a mutation. */
function mutationOf(body: string): Mutation | undefined {
  let payload: unknown;
  try {
    payload = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return undefined;
  const { query, operationName, variables } = payload as {
    query?: unknown;
    operationName?: unknown;
    variables?: unknown;
  };
  if (typeof query !== 'string') return undefined;
  const name = typeof operationName === 'string' ? operationName : undefined;
  if (operationTypeOf(query, name) !== 'mutation') return undefined;
  const given = typeof variables === 'object' && variables !== null ? variables : {};
  return { query, operationName: name, variables: given as Record<string, unknown> };
}

/**
 * Who answered an error response: the idempotency layer (a key in progress, the store down), when
 * every GraphQL error carries one of its codes; the application, when one carries another (Yoga
 * answers with the highest status among a response's errors, so a 503 can stand beside another
 * field's `IDEMPOTENCY_OUTCOME_UNKNOWN` or its own error, which a retry would run again); a proxy,
 * when the body is no GraphQL response (a load balancer's 502 page).
 */
async function whoAnswered(response: Response): Promise<{ idempotent: boolean } | { fromProxy: true }> {
  try {
    const { errors } = (await response.clone().json()) as { errors?: unknown };
    if (!Array.isArray(errors) || errors.length === 0) return { fromProxy: true };
    return {
      idempotent: errors.every((error) => RETRYABLE_CODES.has((error as GraphQLErrorLike)?.extensions?.code)),
    };
  } catch {
    return { fromProxy: true };
  }
}

interface GraphQLErrorLike {
  extensions?: { code?: unknown };
}

/** Statuses a constructed response must have no body with. */
const NULL_BODY = new Set([204, 205, 304]);
/** Media types of a body delivered in parts, each meant to be read as it comes. */
const INCREMENTAL = /^\s*(multipart\/|text\/event-stream)/i;

/**
 * An abort from inside `fetch` (its own `AbortController`, perhaps on the caller's behalf), which is
 * not retried. A `TimeoutError` (`AbortSignal.timeout` on one attempt) is: the answer may have been
 * lost after the server ran the call, and the next attempt replays it.
 */
function isAbort(error: unknown): boolean {
  return error instanceof Error && error.name === 'AbortError';
}

/**
 * `response` with its body read to the end, so that a body cut off fails here, and with `header`
 * added (a `204` too). One delivered in parts as they come (`@defer`, a subscription's events) is
 * returned as it is, and so is one with a status a constructed response cannot have (an opaque
 * redirect's 0).
 */
async function readWhole(
  response: Response,
  header: [name: string, value: string] | undefined,
): Promise<Response> {
  const type = response.headers.get('content-type') ?? '';
  const { status } = response;
  if (status < 200 || status > 599 || INCREMENTAL.test(type)) return response;
  const body = response.body === null || NULL_BODY.has(status) ? null : await response.arrayBuffer();
  const whole = new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
  if (header) whole.headers.set(...header);
  // What a constructed response cannot be given, as the one read had it.
  Object.defineProperties(whole, {
    url: { value: response.url },
    redirected: { value: response.redirected },
  });
  return whole;
}
