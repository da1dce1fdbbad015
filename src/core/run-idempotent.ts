import {
  answer,
  type Call,
  type ClaimInfo,
  defaultErrorCodec,
  type ErrorCodec,
  type IdempotentResult,
  type RecordInfo,
  type Resolver,
  type ResolverClaim,
  replayPolicy,
  stillRunning,
} from './call.js';
import { CallTracking } from './call-tracking.js';
import { decide, foreignRecordError } from './decide.js';
import { waitWhileRunning } from './duplicate-wait.js';
import type { IdempotencyEventHandler, IdempotencyEventType } from './events.js';
import { type FingerprintOptions, fingerprint } from './fingerprint.js';
import { type KeyPolicy, storedAsAnother, validateKey } from './key.js';
import { runUnderLease } from './lease-runner.js';
import type { IdempotencyKeySource, ObserveCall } from './observer.js';
import { type Serializer, superjsonSerializer } from './serializer.js';
import { heldKeys, readAlone, waitForHolders } from './single-flight.js';
import type { Store, StoredRecord } from './store.js';
import { runInTransaction } from './transactional-runner.js';

export type { ClaimInfo, ErrorCodec, IdempotentResult, RecordInfo, Resolver, ResolverClaim };
export { defaultErrorCodec };

/** Options of `runIdempotent`. Integrations fill most of them from their own options. */
export interface RunIdempotentOptions<Tx = unknown> {
  /** Where records live. */
  store: Store<Tx>;
  /**
   * The principal or tenant the key belongs to (e.g. the user id). `null` is accepted only with
   * `allowGlobalScope`.
   */
  scope: string | number | null | undefined;
  /** Let a `null` scope mean "one scope for everybody". @default false */
  allowGlobalScope?: boolean | undefined;
  /** The idempotency key the client sent. */
  key: string;
  /** What is being run: the tRPC path, the GraphQL field coordinate or operation. */
  operation: string;
  /** The validated input, without the key field. Hashed into the fingerprint. */
  input: unknown;
  /**
   * The client says it has not sent this key before (the shipped clients' `Idempotency-Attempt: 1`):
   * skip the read that answers a replay outside any transaction and claim at once, saving a round
   * trip on a fresh key. The claim still answers for a record that exists (a replay, a duplicate
   * running elsewhere, a takeover), so a wrong hint costs time, never correctness. A completed record
   * a `localCache` keeps is still answered from memory, and a call that waited for a duplicate of
   * this process reads as usual.
   * @default false
   */
  firstAttempt?: boolean | undefined;
  /**
   * `transactional`: claim, resolver and result commit in one store transaction (effects inside
   * the database). `lease`: the claim commits first with a lease and an owner token, the resolver
   * runs outside any transaction (its `tx` is the store's plain client, so its writes commit on
   * their own), and the result is stored afterwards only if the token still owns the key — for
   * effects outside the database (payment gateways, e-mail, outgoing webhooks).
   * @default the store's `defaults.mode`, else 'transactional'
   */
  mode?: 'transactional' | 'lease' | undefined;
  /**
   * Lease mode: how long the claim is held. A duplicate within it waits for the result (reading the
   * record again now and then, up to `waitTimeoutMs`), else gets `IDEMPOTENCY_KEY_IN_PROGRESS` with
   * the rest of the lease as its retry hint; after it another request may take the key over,
   * and this request's late result is then fenced off. Choose it longer than the slowest resolver,
   * or set `heartbeatMs`.
   * @default the store's `defaults.leaseMs`, else 30_000
   */
  leaseMs?: number | undefined;
  /**
   * Lease mode: while the resolver runs, extend the lease to `now + leaseMs` every `heartbeatMs`
   * (for as long as this request still owns it). Must be shorter than `leaseMs`; a third of it
   * leaves room for two missed beats.
   * @default the store's `defaults.heartbeatMs`, else none
   */
  heartbeatMs?: number | undefined;
  /**
   * Lease mode: the heartbeat stops extending the lease this long after the claim began (a wait
   * for a duplicate included), so a hung resolver's key is freed (and listed by `stuck`) instead
   * of being held forever. A call that runs steps needs `ttlMs` longer than this with a heartbeat
   * (than `leaseMs` without one): it must not outlive its own steps.
   * @default 300_000 (5 minutes), or `leaseMs` if longer
   */
  maxLeaseMs?: number | undefined;
  /**
   * A monotonic clock in milliseconds, for waits, the lease's cap and event durations; tests
   * inject one. Liveness (expiry, leases) is never decided with it: the store decides it by its
   * own clock (a database's, in SQL).
   * @default performance.now
   */
  clock?: (() => number) | undefined;
  /**
   * How long a completed record is replayed, from its completion; in lease mode also how long a claim
   * and its steps are kept for a retry to resume, from the claim (so, for a call that runs steps,
   * longer than the longest it may hold its key, see `maxLeaseMs`). At most a hundred
   * years (`RangeError` past it). @default 86_400_000 (24 h)
   */
  ttlMs?: number | undefined;
  /**
   * Largest serialized result stored. Over it the mutation fails with `IDEMPOTENCY_RESULT_TOO_LARGE`:
   * in transactional mode nothing commits; in lease mode the effects have happened, so that error is
   * stored and replayed instead of the result.
   * @default 1_048_576
   */
  maxResultBytes?: number | undefined;
  /**
   * How long a duplicate waits for the request holding the key, in either mode, before it gets
   * `IDEMPOTENCY_KEY_IN_PROGRESS`. In transactional mode it also bounds the claim statement itself
   * (a database cannot tell a slow claim from one waiting for a duplicate), so it must be positive
   * there; in lease mode `0` answers a duplicate at once. At most 2_147_483_647 (a timer's limit).
   * @default 10_000
   */
  waitTimeoutMs?: number | undefined;
  /**
   * The retry hint given with `IDEMPOTENCY_KEY_IN_PROGRESS` when no lease tells a better one
   * (transactional mode). @default 1_000
   */
  retryAfterMs?: number | undefined;
  /** @default the store's serializer, else superjson */
  serializer?: Serializer | undefined;
  /**
   * Which resolver (and step) errors are stored and replayed (e.g. a declined card). Any other
   * error leaves the key retryable: transactional mode rolls everything back and leaves no record;
   * lease mode releases the claim, or, when the key holds durable steps, keeps the record and ends
   * its lease so that a retry resumes after them. A `replayErrors` that throws accepts nothing:
   * the caller gets the resolver's own error. An error of ours the resolver throws (a nested
   * call's, or one caused by it) is never kept: it speaks of another key.
   * @default () => false
   */
  replayErrors?: ((error: unknown) => boolean) | undefined;
  /** How replayable errors are stored and rebuilt. @default name, message and code, rebuilt as `Error` */
  errorCodec?: ErrorCodec | undefined;
  /** Rules for the key. */
  keyPolicy?: KeyPolicy | undefined;
  /** Limits of the fingerprint. */
  fingerprintOptions?: FingerprintOptions | undefined;
  /**
   * Receives what happened: `claimed`, `expired_takeover`, `completed`, `replayed`, `mismatch`,
   * `in_progress`, `outcome_unknown`, and in lease mode `released` and `fenced` (see
   * `IdempotencyEventType`). Nothing is logged by default.
   */
  onEvent?: IdempotencyEventHandler | undefined;
  /**
   * Observes each call: its start and end, its phases (`wait`, `claim`, `resolver`, `store`), its
   * outcome and the transaction's retries (see `CallObserver`). `idempotent-mutations/opentelemetry`
   * makes one; any tracer or metrics library can be plugged in the same way. When unset, nothing
   * is observed and nothing is paid for it.
   * @default undefined
   */
  observe?: ObserveCall | undefined;
  /**
   * Where the key came from, told to `observe` (`idempotency.key_source`). The integrations set it.
   * @default undefined
   */
  keySource?: IdempotencyKeySource | undefined;
}

const DAY_MS = 86_400_000;

/**
 * The longest `ttlMs` and `leaseMs`: a hundred years. Stores add them to the database's clock, and
 * a time past what a column holds (MariaDB's DATETIME ends with 9999) was stored as NULL or a zero
 * date, which reads as no lease (a duplicate ran the mutation again) or no expiry.
 */
export const MAX_DURATION_MS = 100 * 365.25 * DAY_MS;

/** `ms` is a whole number of milliseconds from 1 to `MAX_DURATION_MS`. */
export function isDuration(ms: number): boolean {
  return Number.isSafeInteger(ms) && ms > 0 && ms <= MAX_DURATION_MS;
}

const defaultSerializer = superjsonSerializer();

/**
 * Runs `resolver` at most once per `(scope, key)` and replays its stored result to every retry.
 *
 * A live record is answered from one read outside any transaction (`decide`), which a first attempt
 * (`firstAttempt`) skips. Otherwise the call runs in transactional mode (`runInTransaction`: claim,
 * resolver and result in one store transaction) or in lease mode (`runUnderLease`: the claim commits
 * first, the result is stored under the claim's owner token). Duplicates of a transactional call in the same process wait
 * for it without opening transactions of their own (`single-flight`).
 */
export async function runIdempotent<T, Tx = unknown>(
  options: RunIdempotentOptions<Tx>,
  resolver: Resolver<T, Tx>,
): Promise<IdempotentResult<T>> {
  const { call, mode } = resolveCall(options, resolver);
  return call.tracking ? call.tracking.run(() => dispatch(call, mode)) : dispatch(call, mode);
}

/** Answers from the record, or runs the call in its mode. */
async function dispatch<T, Tx>(
  call: Call<T, Tx>,
  mode: 'transactional' | 'lease',
): Promise<IdempotentResult<T>> {
  const { store, request, tracking } = call;
  const held = heldKeys(store.backend ?? store);
  const id = `${request.scope}\u0000${request.key}`;
  const waitStarted = call.clock();
  let duplicate = false;
  /** How long this call has waited for calls of this process holding its key. */
  let waitedMs = 0;
  for (;;) {
    if (held.holders.has(id)) {
      duplicate = true;
      const since = call.clock();
      const holders = waitForHolders(held, id, call.waitDeadline, call.clock);
      const done = await (tracking ? tracking.waitFor(holders) : holders);
      waitedMs += call.clock() - since;
      if (!done) {
        call.emit('in_progress');
        throw stillRunning(call);
      }
    }
    // A first attempt reads no record (the claim answers for one after all), unless it met a
    // holder of its key: it is a duplicate then, and the holder's record is one read away.
    const cached =
      call.firstAttempt && !duplicate ? (store.findCached?.(request.scope, request.key) ?? null) : undefined;
    let record: StoredRecord | null = null;
    if (cached !== null) {
      const read = await readAlone(held, id, () => recordOf(call, cached, waitStarted));
      // Another call of this process took the key while we read, or since (this call would then
      // queue on its row in a transaction of its own): wait for it, then read again.
      if (read.overlapped || held.holders.has(id)) {
        duplicate = true;
        continue;
      }
      record = read.value;
    }
    const decision = decide(record, request);
    if (decision.kind === 'foreign') throw foreignRecordError(record!, request);
    if (decision.kind !== 'claim' && decision.kind !== 'takeOver') return answer(call, record!, decision);
    break;
  }
  return mode === 'lease' ? runUnderLease(call) : runInTransaction(call, held, id, waitedMs);
}

/**
 * The key's record as the call finds it: the one the store's memory gave (`cached`), else read from
 * the store; then, while another call runs under a lease, waited on (`waitWhileRunning`).
 */
async function recordOf<T, Tx>(
  call: Call<T, Tx>,
  cached: StoredRecord | undefined,
  waitStarted: number,
): Promise<StoredRecord | null> {
  const found = cached ?? (await call.store.find(call.request.scope, call.request.key));
  return waitWhileRunning(call, found, waitStarted);
}

/** Checks the options and fills in their defaults. */
function resolveCall<T, Tx>(
  options: RunIdempotentOptions<Tx>,
  resolver: Resolver<T, Tx>,
): { call: Call<T, Tx>; mode: 'transactional' | 'lease' } {
  const { store, operation, onEvent } = options;
  const clock = options.clock ?? (() => performance.now());
  const started = clock();
  const mode = options.mode ?? store.defaults?.mode ?? 'transactional';
  if (mode !== 'transactional' && mode !== 'lease') {
    throw new TypeError(`Unknown idempotency mode ${String(mode)}: use 'transactional' or 'lease'`);
  }
  if (mode === 'transactional' && typeof store.transaction !== 'function') {
    throw new TypeError("This store has no transactions: use mode: 'lease'");
  }
  const leaseMs = options.leaseMs ?? store.defaults?.leaseMs ?? 30_000;
  const heartbeatMs = options.heartbeatMs ?? store.defaults?.heartbeatMs;
  const maxLeaseMs = options.maxLeaseMs ?? Math.max(300_000, leaseMs);
  const ttlMs = options.ttlMs ?? DAY_MS;
  if (!isDuration(ttlMs)) {
    throw new RangeError(`ttlMs must be an integer from 1 to ${MAX_DURATION_MS} (a hundred years)`);
  }
  if (mode === 'lease') checkLeaseOptions(leaseMs, heartbeatMs, maxLeaseMs);
  const key = validateKey(options.key, options.keyPolicy);
  if (typeof operation !== 'string' || operation.length === 0 || operation.length > 255) {
    throw new TypeError('The idempotency operation must be a string of 1 to 255 characters');
  }
  const scope = resolveScope(options.scope, options.allowGlobalScope ?? false);
  const waitTimeoutMs = options.waitTimeoutMs ?? 10_000;
  checkWaitTimeout(waitTimeoutMs, mode);
  const request = {
    scope,
    key,
    operation,
    fingerprint: fingerprint(operation, options.input, options.fingerprintOptions),
  };
  const tracking = CallTracking.of(
    options.observe,
    {
      scope,
      key,
      operation,
      fingerprint: request.fingerprint,
      mode,
      keySource: options.keySource,
      firstAttempt: options.firstAttempt ?? false,
    },
    clock,
  );
  const emit = (type: IdempotencyEventType) => {
    tracking?.event(type);
    try {
      onEvent?.({ type, scope, key, operation, mode, durationMs: clock() - started });
    } catch {
      // An observer must never change the outcome.
    }
  };
  const call: Call<T, Tx> = {
    store,
    request,
    resolver,
    ttlMs,
    leaseMs,
    heartbeatMs,
    maxLeaseMs,
    maxResultBytes: options.maxResultBytes ?? 1_048_576,
    waitTimeoutMs,
    waitDeadline: started + waitTimeoutMs,
    retryAfterMs: options.retryAfterMs ?? 1_000,
    serializer: options.serializer ?? store.serializer ?? defaultSerializer,
    replayErrors: replayPolicy(options.replayErrors),
    errorCodec: options.errorCodec ?? defaultErrorCodec,
    firstAttempt: options.firstAttempt ?? false,
    clock,
    emit,
    tracking,
  };
  return { call, mode };
}

/**
 * The scope records are kept under. An empty string stands for the global scope, so a scope
 * function must return a non-empty value for real principals.
 */
export function resolveScope(scope: unknown, allowGlobalScope: boolean): string {
  if (typeof scope === 'number') {
    // NaN and ±Infinity would put every caller whose principal is missing into one scope.
    if (!Number.isFinite(scope)) {
      throw new TypeError(
        `The idempotency scope is ${String(scope)}: return a real principal from \`scope\` (e.g. Number(undefined) is NaN for every logged-out caller)`,
      );
    }
    return String(scope);
  }
  if (typeof scope === 'bigint') return String(scope);
  if (typeof scope === 'string' && scope.length > 0) {
    if (scope.length > 255) throw new TypeError('The idempotency scope is longer than 255 characters');
    // Stored as another scope, another principal's.
    if (storedAsAnother(scope)) {
      throw new TypeError(
        'The idempotency scope holds a NUL character or an unpaired UTF-16 surrogate, which a database would store as another scope: return the principal as well-formed text',
      );
    }
    return scope;
  }
  if ((scope === null || scope === undefined) && allowGlobalScope) return '';
  throw new TypeError(
    `The idempotency scope must be a non-empty string or a finite number (got ${scope === '' ? 'an empty string' : String(scope)}); ` +
      'return the principal from `scope`, or set `allowGlobalScope: true` to share keys across everybody',
  );
}

/** The largest delay a Node timer keeps: a longer one fires at once. */
export const MAX_TIMER_MS = 2_147_483_647;

function checkWaitTimeout(waitTimeoutMs: number, mode: 'transactional' | 'lease'): void {
  if (!Number.isSafeInteger(waitTimeoutMs) || waitTimeoutMs < 0 || waitTimeoutMs > MAX_TIMER_MS) {
    throw new RangeError(`waitTimeoutMs must be an integer from 0 to ${MAX_TIMER_MS}`);
  }
  if (mode === 'transactional' && waitTimeoutMs === 0) {
    throw new RangeError(
      'waitTimeoutMs must be positive in transactional mode: it also bounds the claim statement itself, so 0 would answer IDEMPOTENCY_KEY_IN_PROGRESS to every call',
    );
  }
}

function checkLeaseOptions(leaseMs: number, heartbeatMs: number | undefined, maxLeaseMs: number): void {
  if (!isDuration(leaseMs)) {
    throw new RangeError(`leaseMs must be an integer from 1 to ${MAX_DURATION_MS} (a hundred years)`);
  }
  // Node's timers hold at most MAX_TIMER_MS: a longer interval fires every millisecond.
  if (
    heartbeatMs !== undefined &&
    !(
      Number.isSafeInteger(heartbeatMs) &&
      heartbeatMs > 0 &&
      heartbeatMs < leaseMs &&
      heartbeatMs <= MAX_TIMER_MS
    )
  ) {
    throw new RangeError(
      `heartbeatMs must be an integer from 1 to ${MAX_TIMER_MS} (about 24.8 days, the most Node's timers hold), shorter than leaseMs`,
    );
  }
  if (!(maxLeaseMs >= leaseMs)) throw new RangeError('maxLeaseMs must be at least leaseMs');
}
