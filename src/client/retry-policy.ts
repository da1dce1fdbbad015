/** How a client retries a mutation that may or may not have reached the server. */
export interface RetryOptions {
  /**
   * Attempts in all, the first one included; `1` turns retries off.
   * @default 5
   */
  attempts?: number | undefined;
  /**
   * The wait before the first retry; each further retry doubles it (with jitter).
   * @default 250
   */
  baseDelayMs?: number | undefined;
  /**
   * The longest wait between two attempts, a server's `Retry-After` included.
   * @default 10_000
   */
  maxDelayMs?: number | undefined;
}

/** Why an attempt failed, as far as retrying is concerned. */
export type AttemptFailure =
  /**
   * No answer arrived: the connection failed (or `retryingProxyErrors` made a proxy's page a failed
   * fetch). The request may or may not have run on the server.
   */
  | { kind: 'network' }
  /**
   * An answer with this status, and maybe a hint of when to retry: a `Retry-After` header, or a
   * finer `retryAfterMs` from the response body (which wins).
   */
  | {
      kind: 'status';
      status: number;
      retryAfter?: string | null;
      retryAfterMs?: number;
      /**
       * `false` when the response shows that the failure is not the idempotency layer's: a 409 or
       * 503 the application itself answered, which another attempt would run again.
       */
      idempotent?: boolean;
      /**
       * `true` when the answer is not the server's but that of something in front of it: a body
       * that is not the server's answer (a proxy's or load balancer's page).
       */
      fromProxy?: boolean;
    }
  /**
   * An answer with no status this client can read: an error shape without `httpStatus` (a formatter
   * of your own, over a WebSocket), or a body that is not JSON (a proxy's page, which may stand for
   * any answer, `IDEMPOTENCY_OUTCOME_UNKNOWN` among them). Retried only when it names a retryable code.
   */
  | { kind: 'answer'; retryable: boolean; retryAfterMs?: number };

/**
 * 409: the key is held by a request still running. 503: the store is down, or its transaction
 * expired and rolled back. The idempotency layer answers these only when nothing ran (or all of it
 * rolled back), so retrying with the same key is safe. `IDEMPOTENCY_OUTCOME_UNKNOWN` (500) is
 * never retried by itself.
 */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([409, 503]);

/**
 * What a proxy or load balancer answers in the server's place when it lost the server's answer
 * (502: the connection to it failed; 504: it took too long; 408, 503): the request may have run,
 * so, from a proxy, these are retried with the same key, as a lost connection is; the server
 * replays its answer, or says the key is still running. The server's own 502 or 504 is final.
 */
export const LOST_ANSWER_STATUSES: ReadonlySet<number> = new Set([408, 502, 503, 504]);

/** The codes of the idempotency layer's retryable answers, where a response names its code. */
export const RETRYABLE_CODES: ReadonlySet<unknown> = new Set([
  'IDEMPOTENCY_KEY_IN_PROGRESS',
  'IDEMPOTENCY_STORE_UNAVAILABLE',
  'IDEMPOTENCY_TRANSACTION_EXPIRED',
]);

/**
 * How long to wait before the next attempt, or `undefined` when the failure must be returned:
 * attempts used up, a status that another attempt cannot change (400, 422, any other 4xx, 500,
 * the server's own 502 or 504), or a 409 or 503 that the application answered itself.
 * `attempt` is the number of attempts made so far (1 after the first).
 */
export function retryDelay(
  failure: AttemptFailure,
  attempt: number,
  options: RetryOptions = {},
  random: () => number = Math.random,
): number | undefined {
  const { attempts = 5, baseDelayMs = 250, maxDelayMs = 10_000 } = options;
  if (attempt >= attempts) return undefined;
  if (failure.kind === 'status' && !retriesStatus(failure)) return undefined;
  if (failure.kind === 'answer' && !failure.retryable) return undefined;
  // "Equal jitter": at least half the exponential step, so retries neither collide nor come too soon.
  const step = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
  const backoff = step / 2 + random() * (step / 2);
  const hint =
    failure.kind === 'status'
      ? (failure.retryAfterMs ?? retryAfterMs(failure.retryAfter))
      : failure.kind === 'answer'
        ? failure.retryAfterMs
        : undefined;
  return Math.min(maxDelayMs, MAX_TIMER_MS, Math.max(backoff, hint ?? 0));
}

/** Whether another attempt may change this answer: see the two sets above. */
function retriesStatus({
  status,
  idempotent,
  fromProxy,
}: Extract<AttemptFailure, { kind: 'status' }>): boolean {
  if (fromProxy && LOST_ANSWER_STATUSES.has(status)) return true;
  return idempotent !== false && RETRYABLE_STATUSES.has(status);
}

/** The longest delay `setTimeout` keeps (about 24.8 days): a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Reads a `Retry-After` value: delay-seconds or an HTTP date. `undefined` when absent or malformed. */
export function retryAfterMs(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // Only an HTTP date's forms: Date.parse alone takes "-1", "Retry in 2027" and "a 1" too.
  const date = HTTP_DATE.test(text) ? Date.parse(text.endsWith('GMT') ? text : `${text} GMT`) : Number.NaN;
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/**
 * The three forms of an HTTP date (RFC 9110, 5.6.7): IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"),
 * RFC 850's ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime's ("Sun Nov  6 08:49:37 1994", in GMT).
 */
const HTTP_DATE =
  /^(?:[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT|[A-Z][a-z]{5,8}, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})$/;

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
