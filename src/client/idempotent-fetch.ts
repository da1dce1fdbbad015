import { operationTypeOf, passesArgument } from './graphql-document.js';
import { keyHeaderValue } from './key-header.js';
import { type ActiveSpanSource, markResend } from './resend-count.js';
import {
  type AttemptFailure,
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
  header?: string;
  /**
   * The argument of field-level keys (as the server's `useIdempotency` names it). A mutation whose
   * document gives it a value (not `null`, nor a variable left unset or null) already carries its
   * keys: it gets no header (the server would refuse a header that disagrees with them), and its
   * retries resend those same keys.
   * @default 'idempotencyKey'
   */
  argumentName?: string;
  /**
   * Makes the key of a new logical mutation.
   * @default () => crypto.randomUUID()
   */
  generateKey?: () => string;
  /** How failed attempts are retried. @default { attempts: 5, baseDelayMs: 250, maxDelayMs: 10_000 } */
  retry?: RetryOptions;
  /**
   * `trace` from `@opentelemetry/api`: each retry sets `http.request.resend_count` on the span
   * active when it is sent. @default undefined (nothing recorded)
   */
  trace?: ActiveSpanSource;
}

/**
 * Wraps `fetch` for GraphQL clients. A POST whose JSON body runs a mutation gets an idempotency
 * key (unless it already has the header, or passes field-level keys as arguments), and is retried
 * with that same key on network failures,
 * 409 (key still in progress, honouring `Retry-After`) and 503 (store unavailable), with jittered
 * exponential backoff; the request's `signal` stops the retries. A 409 or 503 whose GraphQL errors
 * carry other codes than the idempotency layer's is the application's own answer: returned as is.
 * Every other request (queries, subscriptions, batched arrays, persisted queries without their
 * text, multipart uploads) is passed to `fetch` untouched.
 *
 * A retry sends the whole operation again: the server must treat the operation as one idempotent
 * unit (an operation-level key), which is what the header is for.
 */
export function idempotentFetch(
  fetch: FetchFunction = globalThis.fetch,
  options: IdempotentFetchOptions = {},
): FetchFunction {
  const {
    header = 'Idempotency-Key',
    argumentName = 'idempotencyKey',
    generateKey = () => globalThis.crypto.randomUUID(),
    retry,
    trace,
  } = options;

  return async (input, init) => {
    const request = input instanceof Request ? input : undefined;
    const method = (init?.method ?? request?.method ?? 'GET').toUpperCase();
    if (method !== 'POST') return fetch(input, init);
    const body = await bodyText(init, request);
    const mutation = body === undefined ? undefined : mutationOf(body);
    if (mutation === undefined) return fetch(input, init);

    const headers = new Headers(init?.headers ?? request?.headers);
    if (!headers.has(header) && !passesArgument(mutation.query, argumentName, mutation.variables)) {
      headers.set(header, keyHeaderValue(generateKey()));
    }
    const signal = init?.signal ?? request?.signal;
    // The body is sent again on every attempt, so it travels as the text read above.
    const send = () =>
      request && !init
        ? fetch(new Request(request, { headers, body }))
        : fetch(input, { ...init, method, headers, body });

    for (let attempt = 1; ; attempt++) {
      let response: Response;
      markResend(trace, attempt - 1);
      try {
        response = await send();
      } catch (error) {
        const delay = signal?.aborted || isAbort(error) ? undefined : retryDelay(NETWORK, attempt, retry);
        if (delay === undefined) throw error;
        await sleep(delay, signal);
        continue;
      }
      const failure: AttemptFailure = {
        kind: 'status',
        status: response.status,
        retryAfter: response.headers.get('retry-after'),
        idempotent: RETRYABLE_STATUSES.has(response.status) ? await answeredByLayer(response) : undefined,
      };
      const delay = signal?.aborted ? undefined : retryDelay(failure, attempt, retry);
      if (delay === undefined) return response;
      await response.body?.cancel().catch(() => undefined);
      await sleep(delay, signal);
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
  if (request && !init?.body && request.body) return request.clone().text();
  return undefined;
}

/** The document and variables of a body that is one GraphQL operation, over JSON, running a mutation. */
function mutationOf(body: string): { query: string; variables: Record<string, unknown> } | undefined {
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
  const type = operationTypeOf(query, typeof operationName === 'string' ? operationName : undefined);
  if (type !== 'mutation') return undefined;
  const given = typeof variables === 'object' && variables !== null ? variables : {};
  return { query, variables: given as Record<string, unknown> };
}

/**
 * Whether a GraphQL error response is the idempotency layer's own (a key in progress, the store
 * down), told by its errors' `extensions.code`; `undefined` when the body is not such a response.
 */
async function answeredByLayer(response: Response): Promise<boolean | undefined> {
  try {
    const { errors } = (await response.clone().json()) as { errors?: unknown };
    if (!Array.isArray(errors) || errors.length === 0) return undefined;
    return errors.some((error) => RETRYABLE_CODES.has((error as GraphQLErrorLike)?.extensions?.code));
  } catch {
    return undefined;
  }
}

interface GraphQLErrorLike {
  extensions?: { code?: unknown };
}

function isAbort(error: unknown): boolean {
  return error instanceof Error && (error.name === 'AbortError' || error.name === 'TimeoutError');
}
