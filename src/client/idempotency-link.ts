import { type Operation, TRPCClientError, type TRPCLink } from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';
import { observable, type Unsubscribable } from '@trpc/server/observable';
import { ATTEMPT_HEADER } from '../core/attempt-header.js';
import {
  activeSpanSource,
  aFunction,
  checkOptions,
  headerName,
  nonEmptyString,
  oneOf,
  retryOptions,
} from './client-options.js';
import { keyHeaderValue, UnsendableKeyError } from './key-header.js';
import { newKey, randomKey } from './new-key.js';
import { CutOffAnswerError } from './proxy-answers.js';
import { type ActiveSpanSource, markResend } from './resend-count.js';
import { type AttemptFailure, RETRYABLE_CODES, type RetryOptions, retryDelay } from './retry-policy.js';

/** Options of `idempotencyLink`. */
export interface IdempotencyLinkOptions {
  /**
   * The header the key travels in. The link puts it in the operation's context;
   * `idempotencyHeaders` on the terminating link writes it.
   * @default 'Idempotency-Key'
   */
  header?: string | undefined;
  /**
   * Where the key is sent, besides the operation's context (from which `idempotencyHeaders` on an
   * `httpLink` writes the header). `'input'`: also in the mutation's input, as the field
   * `inputField` of a plain-object input, or as the whole input `{ idempotencyKey }` of a mutation
   * without one, so the key reaches the server whatever the terminating link: `httpBatchLink`, whose
   * calls share one set of headers, or an `httpLink` without `headers: idempotencyHeaders`. An input
   * schema that refuses unknown fields (`.strict()`) must then declare the field, and so must an
   * optional or void input called without one (`z.object({ idempotencyKey: z.string() }).optional()`);
   * the link's error says so when the server refuses that input. `'header'`: only in
   * the context, for a terminating link that sends it. A mutation whose input is neither a plain
   * object nor absent has only the header, whatever this option. A mutation the server answers with
   * `IDEMPOTENCY_KEY_MISSING` although no `idempotencyHeaders` wrote its key fails with an error
   * saying how to send it (the server's error as its `cause`): through `httpLink({ headers:
   * idempotencyHeaders })`, or, for a non-object input, by giving the procedure an object input;
   * with `'header'` and an object input, also by leaving this option at `'input'`. A mutation whose
   * key was sent neither way (a string input behind `httpBatchLink`, say) is never retried:
   * nothing keyed it, so the server may have run it. A key the caller put in the input field is sent
   * with the input, whatever this option.
   * @default 'input'
   */
  sendKeyIn?: 'header' | 'input' | undefined;
  /**
   * The input field the key is written to (with `sendKeyIn: 'input'`) and read from when the
   * caller already put one there.
   * @default 'idempotencyKey'
   */
  inputField?: string | undefined;
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
 * A tRPC v11 link that makes every mutation safe to retry: it gives each call one idempotency key
 * (a caller's `context.idempotencyKey`, or a key already in the input, wins), keeps that key for all
 * of the call's attempts, and retries network failures, 409 (key still in progress, honouring
 * `Retry-After`), 503 (store unavailable) and answers that are not the server's (a gateway's 502 or
 * 504 in JSON, a proxy's page through `retryingProxyErrors`) with jittered exponential backoff.
 * Other errors, 400 and 422 among them, and the server's own 502 or 504, are returned at once;
 * `op.signal` stops the retries. The error of a mutation whose key went out carries it as
 * `error.meta.idempotencyKey`, to call again with after a give-up.
 * Queries and subscriptions pass through untouched. Place it before the terminating link:
 * `links: [idempotencyLink(), httpBatchLink({ url, headers: idempotencyHeaders })]` (the key travels
 * in the input), or `links: [idempotencyLink(), httpLink({ url, headers: idempotencyHeaders })]` (and
 * as a header). `idempotencyHeaders` also numbers the sends of a key (`Idempotency-Attempt`), which
 * saves the server a read on each first attempt.
 */
export function idempotencyLink<TRouter extends AnyTRPCRouter = AnyTRPCRouter>(
  options: IdempotencyLinkOptions = {},
): TRPCLink<TRouter> {
  checkOptions('idempotencyLink', options, {
    header: headerName,
    sendKeyIn: oneOf('header', 'input'),
    inputField: nonEmptyString,
    generateKey: aFunction,
    retry: retryOptions,
    trace: activeSpanSource,
  });
  const {
    header = 'Idempotency-Key',
    sendKeyIn = 'input',
    inputField = 'idempotencyKey',
    generateKey = randomKey,
    retry,
    trace,
  } = options;
  return () => {
    // A link placed before this one (tRPC's `retryLink`, say) retries by sending the call again:
    // it must get the same key, not a new one, and its sends go on counting. The call is known by
    // `op.id`, not by the operation object, which a link in between may copy on each send; tRPC
    // numbers operations per client, so the map lives here, made once per client.
    const calls = new Map<number, RememberedCall>();
    return ({ op, next }) => {
      if (op.type !== 'mutation') return next(op);
      const input = isPlainObject(op.input) ? op.input : undefined;
      const given = op.context.idempotencyKey ?? input?.[inputField];
      // A key of another type would be replaced by a new one on every call (each a new logical
      // mutation, run again), where the server refuses it; refused here, before anything is sent.
      if (given !== undefined && given !== null && typeof given !== 'string') {
        return observable((observer) => observer.error(nonStringKeyError(given, inputField)));
      }
      const known = calls.get(op.id);
      const key = typeof given === 'string' ? given : (known?.key ?? newKey(generateKey));
      // The call's one entry, changed in place: a send still tearing down (retryLink sends again
      // from inside its error) counts off the entry the map holds, never a copy left behind.
      const sent = known ?? { key, sends: 0, inFlight: 0 };
      sent.key = key;
      remember(calls, op.id, sent);
      // Only the sends of a key this link made are numbered: the caller's may have gone out before.
      const counted = typeof given !== 'string';
      const inInput = sendKeyIn === 'input' && (input !== undefined || op.input === undefined);
      const keyed: Operation = {
        ...op,
        context: { ...op.context, idempotencyKey: key, idempotencyHeader: header },
        input: inInput ? { ...input, [inputField]: key } : op.input,
      };
      // The key reached the server in the input: put there by this link, or by the caller.
      const keyInInput = isPlainObject(keyed.input) && keyed.input[inputField] === key;
      const signal = op.signal;

      return observable((observer) => {
        let attempts = 0;
        let current: Unsubscribable | undefined;
        let timer: ReturnType<typeof setTimeout> | undefined;
        // An error of a call whose key went out carries it, so that the caller can call again with
        // it (`context: { idempotencyKey }`) after a give-up whose outcome is unknown. A key that
        // went nowhere is no such key: the server may have run the call without one.
        const fail = (error: TRPCClientError<AnyTRPCRouter>, keyWentOut = true) =>
          observer.error(keyWentOut ? TRPCClientError.from(error, { meta: { idempotencyKey: key } }) : error);
        const onAbort = () => {
          // Only reached while waiting: an attempt in flight is aborted by the terminating link.
          if (timer === undefined) return;
          clearTimeout(timer);
          const reason = signal?.reason;
          fail(TRPCClientError.from(reason instanceof Error ? reason : new Error(String(reason))));
        };
        const attempt = () => {
          timer = undefined;
          attempts++;
          sent.sends++;
          // Counted across the resends of a link placed before this one too, as the attempt header.
          markResend(trace, sent.sends - 1);
          const sending: Operation = counted
            ? { ...keyed, context: { ...keyed.context, idempotencyAttempt: sent.sends } }
            : keyed;
          const failed = (error: TRPCClientError<AnyTRPCRouter>) => {
            // A key that went nowhere (no input field, no header written) covers nothing: the
            // server may have run the call unkeyed, so sending it again could run it twice.
            const keySent = keyInInput || headerWritten.has(sending.context);
            // A key no header can carry failed `idempotencyHeaders`, before anything was sent.
            const final = signal?.aborted || !keySent || error.cause instanceof UnsendableKeyError;
            const delay = final ? undefined : retryDelay(failureOf(error), attempts, retry);
            if (delay !== undefined) timer = setTimeout(attempt, delay);
            else if (!keySent && isMissingKey(error)) fail(unsentKeyError(key, header, op, error), false);
            else if (inInput && op.input === undefined && isInputRefused(error))
              fail(refusedKeyInputError(inputField, header, error), keySent);
            else fail(error, keySent);
          };
          let answered = false;
          current = next(sending).subscribe({
            next: (envelope) => {
              // An answer is final: nothing sends this call again, so its key can be forgotten.
              answered = true;
              calls.delete(op.id);
              observer.next(envelope);
            },
            // A mutation is answered with its result or its error. One that ended with neither
            // (`httpBatchStreamLink` ends so on a failed response that is not tRPC's, an API
            // gateway's JSON 504) lost its answer on the way, as a dropped connection does.
            complete: () => (answered ? observer.complete() : failed(lostAnswerError())),
            error: failed,
          });
        };
        signal?.addEventListener('abort', onAbort);
        sent.inFlight++;
        attempt();
        return () => {
          sent.inFlight--;
          signal?.removeEventListener('abort', onAbort);
          clearTimeout(timer);
          current?.unsubscribe();
        };
      });
    };
  };
}

/** The failure of a send whose answer ended without a result or an error: retried as a lost answer. */
function lostAnswerError(): TRPCClientError<AnyTRPCRouter> {
  return new TRPCClientError(
    'The answer to this mutation ended without its result or error (a failed response that is not tRPC’s, such as an API gateway’s): it was lost on the way',
  );
}

/** A call's key, how many times it was sent, and how many of its sends are still waiting for an answer. */
interface RememberedCall {
  key: string;
  sends: number;
  inFlight: number;
}

/**
 * How many failed calls a client remembers the key of. A failed call is kept, since a link placed
 * before this one may send it again (`retryLink` does, after an error) and it must then go out with
 * the same key; but whether it will, this link cannot tell, so the oldest are dropped past this
 * many: a resend after so many newer calls of the same client is not worth unbounded memory. A call
 * still waiting for its answer is never dropped, however many there are.
 */
const REMEMBERED_CALLS = 1_000;

/**
 * Records a call's key as the most recently used, dropping the least recently used call that is
 * not in flight past the bound.
 */
function remember(calls: Map<number, RememberedCall>, id: number, call: RememberedCall): void {
  calls.delete(id);
  calls.set(id, call);
  if (calls.size <= REMEMBERED_CALLS) return;
  for (const [oldest, { inFlight }] of calls) {
    if (inFlight > 0) continue;
    calls.delete(oldest);
    return;
  }
}

/**
 * The `headers` option of the terminating link behind `idempotencyLink`. On an `httpLink`
 * (`{ op }`): the call's key, under the link's `header`, and `Idempotency-Attempt`, which sends of
 * that key this is (1, then 2, 3… on retries; only for a key the link made, since a caller's key
 * may have been sent before). On an `httpBatchLink` (`{ opList }`), whose calls share one set of
 * headers: no key (each travels in its call's input), and `Idempotency-Attempt` as the highest
 * over the batch's mutations, so a batch holding any retry, or a mutation whose sends are not
 * counted, is not marked as a first attempt (its queries do not count). The server claims a first
 * attempt's key without reading its record first: one round trip less. Combine it with your own:
 * `headers: ({ op }) => ({ ...idempotencyHeaders({ op }), … })`.
 */
export function idempotencyHeaders(
  options:
    | { op: Pick<Operation, 'context'> }
    | { opList: readonly (Pick<Operation, 'context'> & Partial<Pick<Operation, 'type'>>)[] },
): Record<string, string> {
  if ('opList' in options) {
    // Only mutations take keys; the server looks at no query's attempt.
    const mutations = options.opList.filter(({ type }) => type === undefined || type === 'mutation');
    const attempts = mutations.map(({ context }) => attemptOf(context));
    if (attempts.length === 0 || attempts.includes(undefined)) return {};
    return { [ATTEMPT_HEADER]: String(Math.max(...(attempts as number[]))) };
  }
  const { context } = options.op;
  const { idempotencyKey, idempotencyHeader } = context;
  if (typeof idempotencyKey !== 'string') return {};
  headerWritten.add(context);
  const name = typeof idempotencyHeader === 'string' ? idempotencyHeader : 'Idempotency-Key';
  const attempt = attemptOf(context);
  return {
    [name]: keyHeaderValue(idempotencyKey),
    ...(attempt !== undefined && { [ATTEMPT_HEADER]: String(attempt) }),
  };
}

/** Which send of its key an operation is, when `idempotencyLink` counts them. */
function attemptOf(context: Operation['context']): number | undefined {
  const { idempotencyAttempt } = context;
  return typeof idempotencyAttempt === 'number' ? idempotencyAttempt : undefined;
}

/** The operation contexts whose key `idempotencyHeaders` wrote as a header. */
const headerWritten = new WeakSet<object>();

/** The server's answer to a call without a key: 400 with `IDEMPOTENCY_KEY_MISSING`. */
function isMissingKey(error: TRPCClientError<AnyTRPCRouter>): boolean {
  const data = error.data as { idempotencyCode?: unknown; httpStatus?: unknown } | null | undefined;
  if (data?.idempotencyCode !== undefined) return data.idempotencyCode === 'IDEMPOTENCY_KEY_MISSING';
  return data?.httpStatus === 400 && /requires an idempotency key/.test(error.message);
}

/**
 * A refusal of the call's input by the server's `.input()` validator, as the server's
 * `idempotencyErrorFormatter` marks it (`data.inputRefused`). Without the mark, a `BAD_REQUEST` may
 * as well be the resolver's own ("no active subscription"), whose message must reach the caller.
 */
function isInputRefused(error: TRPCClientError<AnyTRPCRouter>): boolean {
  const data = error.data as { inputRefused?: unknown } | null | undefined;
  return data?.inputRefused === true;
}

/**
 * A mutation called without an input went out with `{ idempotencyKey }` as its whole input, and the
 * server refused the call: most likely an input schema that takes no such object (`.optional()` of
 * an object with required fields, `z.void()`). The server's error is the cause, its message kept.
 */
function refusedKeyInputError(
  inputField: string,
  header: string,
  error: TRPCClientError<AnyTRPCRouter>,
): TRPCClientError<AnyTRPCRouter> {
  return new TRPCClientError(
    `idempotencyLink sent this mutation, called without an input, with the input { ${inputField} } to carry its key, and the server refused the call. If the procedure's input is optional or void, let it take that field (z.object({ ${inputField}: z.string() }).optional()), or send the key as the ${header} header instead (sendKeyIn: 'header', with httpLink({ headers: idempotencyHeaders })). The server answered: ${error.message}`,
    { cause: error, meta: error.meta, result: error.shape ? { error: error.shape } : undefined },
  );
}

/** A caller's key that is not a string: the server would refuse it (`IDEMPOTENCY_KEY_INVALID`). */
function nonStringKeyError(given: unknown, inputField: string): TRPCClientError<AnyTRPCRouter> {
  return new TRPCClientError(
    `idempotencyLink: an idempotency key must be a string, and this mutation's (its context's idempotencyKey or its input's ${inputField}) is ${typeof given === 'object' ? 'an object' : `the ${typeof given} ${String(given)}`}; nothing was sent`,
  );
}

/**
 * The key went nowhere: only the operation's context held it, and nothing wrote it as a header.
 * Either the input cannot carry it (neither a plain object nor absent), or `sendKeyIn: 'header'`
 * left it out of the input, in front of a link without `headers: idempotencyHeaders`.
 */
function unsentKeyError(
  key: string,
  header: string,
  op: Operation,
  error: TRPCClientError<AnyTRPCRouter>,
): TRPCClientError<AnyTRPCRouter> {
  const howToSend =
    op.input === undefined || isPlainObject(op.input)
      ? `with sendKeyIn: 'header' the terminating link must write the ${header} header (httpLink({ headers: idempotencyHeaders })); an httpBatchLink cannot, so leave sendKeyIn at 'input'`
      : `an input that is not an object can carry its key only as the ${header} header, so send this mutation through httpLink({ headers: idempotencyHeaders }) (an httpBatchLink cannot write it), or give the procedure an object input`;
  return new TRPCClientError(
    `idempotencyLink gave this mutation the key ${JSON.stringify(key)}, but it was never sent: ${howToSend}. The server answered: ${error.message}`,
    { cause: error, meta: error.meta, result: error.shape ? { error: error.shape } : undefined },
  );
}

interface ResponseLike {
  status?: number;
  headers?: { get?(name: string): string | null };
}

/**
 * A server's answer carries its status in `data.httpStatus` (the default error shape), else on the
 * response. An error shape without either (over a WebSocket, with a formatter that leaves
 * `httpStatus` out) is still the server's answer. A response in JSON that is not the server's answer
 * (a gateway's) is a proxy's. One whose body is not JSON is an answer too, which `httpLink` reports
 * without its status: it may stand for any answer of the server's (a proxy's page in place of a 500
 * `IDEMPOTENCY_OUTCOME_UNKNOWN`), so it is final; `retryingProxyErrors` makes a proxy's 502 or 504
 * page a failed fetch. A failed fetch, or a body cut off before it was read, counts as lost. The
 * retry hint is `data.retryAfterMs` (the server's `idempotencyErrorFormatter` puts it there) or the
 * `Retry-After` header. With that formatter
 * `data.idempotencyCode` also tells the middleware's 409 and 503 from the application's own.
 */
function failureOf(error: TRPCClientError<AnyTRPCRouter>): AttemptFailure {
  const response = (error.meta as { response?: ResponseLike } | undefined)?.response;
  const data = error.data as
    | { httpStatus?: unknown; retryAfterMs?: unknown; idempotencyCode?: unknown }
    | null
    | undefined;
  // An error shape in a response that did not fail as a whole (a batch's 207, a stream's 200)
  // has no status of its own there; an answer the client could not read keeps the response's.
  const whole = response?.status;
  const failedStatus =
    error.shape !== undefined && typeof whole === 'number' && whole < 400 ? undefined : whole;
  // A body cut off after its status: the server's or a proxy's, nobody can tell, so never a proxy's
  // lost answer (retried), which a server's own 502 or 504 is not.
  const cutOff = failedStatus === undefined ? causeOf(error, CutOffAnswerError)?.status : undefined;
  const status = typeof data?.httpStatus === 'number' ? data.httpStatus : (failedStatus ?? cutOff);
  const retryAfterMs = typeof data?.retryAfterMs === 'number' ? data.retryAfterMs : undefined;
  const code = data && 'idempotencyCode' in data ? data.idempotencyCode : undefined;
  if (typeof status !== 'number') {
    if (error.shape !== undefined)
      return { kind: 'answer', retryable: RETRYABLE_CODES.has(code), retryAfterMs };
    // A body that is not JSON.
    if (causeOf(error, SyntaxError)) return { kind: 'answer', retryable: false };
    return { kind: 'network' };
  }
  return {
    kind: 'status',
    status,
    retryAfter: response?.headers?.get?.('retry-after'),
    retryAfterMs,
    idempotent: data && 'idempotencyCode' in data ? RETRYABLE_CODES.has(code) : undefined,
    fromProxy: error.shape === undefined && cutOff === undefined,
  };
}

/** The first error in `error`'s chain of causes (itself included) of class `Class`, if any. */
function causeOf<E extends Error>(
  error: unknown,
  Class: abstract new (...args: never[]) => E,
): E | undefined {
  let link: unknown = error;
  for (let depth = 0; link instanceof Error && depth < 8; depth++) {
    if (link instanceof Class) return link;
    link = link.cause;
  }
  return undefined;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}
