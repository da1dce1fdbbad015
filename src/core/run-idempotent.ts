import { randomBytes } from 'node:crypto';
import {
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  IdempotencyLeaseLostError,
  IdempotencyResultTooLargeError,
} from './errors.js';
import type { IdempotencyEventHandler, IdempotencyEventType } from './events.js';
import { type FingerprintOptions, fingerprint } from './fingerprint.js';
import { type KeyPolicy, validateKey } from './key.js';
import { type Serializer, superjsonSerializer } from './serializer.js';
import { isLive, type LeaseOperations, type NewClaim, type Store, type StoredRecord } from './store.js';

/** Turns a resolver's error into something storable, and a stored one back into an error. */
export interface ErrorCodec {
  encode(error: unknown): unknown;
  decode(stored: unknown): Error;
}

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
  allowGlobalScope?: boolean;
  /** The idempotency key the client sent. */
  key: string;
  /** What is being run: the tRPC path, the GraphQL field coordinate or operation. */
  operation: string;
  /** The validated input, without the key field. Hashed into the fingerprint. */
  input: unknown;
  /**
   * `transactional`: claim, resolver and result commit in one store transaction (effects inside
   * the database). `lease`: the claim commits first with a lease and an owner token, the resolver
   * runs outside any transaction (its `tx` is the store's plain client, so its writes commit on
   * their own), and the result is stored afterwards only if the token still owns the key — for
   * effects outside the database (payment gateways, e-mail, outgoing webhooks).
   * @default the store's `defaults.mode`, else 'transactional'
   */
  mode?: 'transactional' | 'lease';
  /**
   * Lease mode: how long the claim is held. A duplicate within it gets `IDEMPOTENCY_KEY_IN_PROGRESS`
   * with the rest of the lease as its retry hint; after it another request may take the key over,
   * and this request's late result is then fenced off. Choose it longer than the slowest resolver,
   * or set `heartbeatMs`.
   * @default the store's `defaults.leaseMs`, else 30_000
   */
  leaseMs?: number;
  /**
   * Lease mode: while the resolver runs, extend the lease to `now + leaseMs` every `heartbeatMs`
   * (for as long as this request still owns it). Must be shorter than `leaseMs`; a third of it
   * leaves room for two missed beats.
   * @default the store's `defaults.heartbeatMs`, else none
   */
  heartbeatMs?: number;
  /** How long a completed record is replayed, from its completion. @default 86_400_000 (24 h) */
  ttlMs?: number;
  /** Largest serialized result stored; over it the mutation fails and nothing commits. @default 1_048_576 */
  maxResultBytes?: number;
  /** How long a duplicate waits for the request holding the key. @default 10_000 */
  waitTimeoutMs?: number;
  /**
   * The retry hint given with `IDEMPOTENCY_KEY_IN_PROGRESS` when no lease tells a better one
   * (transactional mode). @default 1_000
   */
  retryAfterMs?: number;
  /** @default the store's serializer, else superjson */
  serializer?: Serializer;
  /**
   * Which resolver errors are stored and replayed (e.g. a declined card). Any other error rolls
   * everything back (lease mode: releases the claim) and leaves no record, so the key can be
   * retried. @default () => false
   */
  replayErrors?: (error: unknown) => boolean;
  /** How replayable errors are stored and rebuilt. @default name, message and code, rebuilt as `Error` */
  errorCodec?: ErrorCodec;
  /** Rules for the key. */
  keyPolicy?: KeyPolicy;
  /** Limits of the fingerprint. */
  fingerprintOptions?: FingerprintOptions;
  /**
   * Receives what happened: `claimed`, `expired_takeover`, `completed`, `replayed`, `mismatch`,
   * `in_progress`, and in lease mode `released` and `fenced`. Nothing is logged by default.
   */
  onEvent?: IdempotencyEventHandler;
}

/** What the resolver is told about the claim it runs under. */
export interface ClaimInfo {
  scope: string;
  key: string;
  operation: string;
  fingerprint: string;
  firstSeenAt: Date;
}

/** The stored record's public facts, returned with every result. */
export interface RecordInfo extends ClaimInfo {
  completedAt: Date;
  expiresAt: Date;
}

/** What `runIdempotent` returns: the value, and whether it was replayed. */
export interface IdempotentResult<T> {
  value: T;
  replayed: boolean;
  record: RecordInfo;
}

const DAY_MS = 86_400_000;
const defaultSerializer = superjsonSerializer();

/**
 * Runs `resolver` at most once per `(scope, key)` and replays its stored result to every retry.
 *
 * A completed record is replayed from one read outside any transaction. Otherwise, in
 * transactional mode, one store transaction claims the key, runs the resolver with the transaction
 * client, stores the serialized result and commits, so a failure anywhere leaves nothing behind.
 * Concurrent duplicates in the same process (same store) wait for that call without opening
 * transactions of their own, then read again; duplicates from other processes wait on the record.
 * In lease mode the claim commits first and the result is stored afterwards under the claim's
 * owner token (see `mode`).
 */
export async function runIdempotent<T, Tx = unknown>(
  options: RunIdempotentOptions<Tx>,
  resolver: (tx: Tx, claim: ClaimInfo) => Promise<T> | T,
): Promise<IdempotentResult<T>> {
  const started = performance.now();
  const {
    store,
    operation,
    input,
    ttlMs = DAY_MS,
    maxResultBytes = 1_048_576,
    waitTimeoutMs = 10_000,
    retryAfterMs = 1_000,
    replayErrors,
    errorCodec = defaultErrorCodec,
    onEvent,
  } = options;
  const mode = options.mode ?? store.defaults?.mode ?? 'transactional';
  if (mode !== 'transactional' && mode !== 'lease') {
    throw new TypeError(`Unknown idempotency mode ${String(mode)}: use 'transactional' or 'lease'`);
  }
  const leaseMs = options.leaseMs ?? store.defaults?.leaseMs ?? 30_000;
  const heartbeatMs = options.heartbeatMs ?? store.defaults?.heartbeatMs;
  if (mode === 'lease') checkLeaseOptions(store, leaseMs, heartbeatMs);
  const key = validateKey(options.key, options.keyPolicy);
  if (typeof operation !== 'string' || operation.length === 0 || operation.length > 255) {
    throw new TypeError('The idempotency operation must be a string of 1 to 255 characters');
  }
  const scope = resolveScope(options.scope, options.allowGlobalScope ?? false);
  const serializer = options.serializer ?? store.serializer ?? defaultSerializer;
  const hash = fingerprint(operation, input, options.fingerprintOptions);
  const emit = (type: IdempotencyEventType) => {
    try {
      onEvent?.({ type, scope, key, operation, mode, durationMs: performance.now() - started });
    } catch {
      // An observer must never change the outcome.
    }
  };

  /** Replays a live record, or throws the error it stands for. */
  const answer = (record: StoredRecord, now: Date): IdempotentResult<T> => {
    if (record.operation !== operation || record.fingerprint !== hash) {
      emit('mismatch');
      throw new IdempotencyKeyMismatchError(record.createdAt);
    }
    if (record.status === 'IN_PROGRESS') {
      emit('in_progress');
      const lockedUntil = record.lockedUntil?.getTime() ?? now.getTime() + retryAfterMs;
      throw new IdempotencyKeyInProgressError(lockedUntil - now.getTime());
    }
    emit('replayed');
    const value = serializer.deserialize(record.result ?? '');
    if (record.resultIsError) throw errorCodec.decode(value);
    return { value: value as T, replayed: true, record: infoOf(record, hash) };
  };

  // A duplicate of a call that holds the key in this process waits for it first, holding no
  // database connection (rather than in a transaction of its own, queued behind the holder's row
  // lock), and reads only once the holder has committed or rolled back: through a
  // single-connection adapter (Prisma's SQLite) a read would see its uncommitted result.
  const holding = holdersOf(store.backend ?? store);
  const id = `${scope}\u0000${key}`;
  const waitUntil = performance.now() + waitTimeoutMs;
  let readAt = new Date();
  for (;;) {
    for (let holder = holding.get(id); holder; holder = holding.get(id)) {
      if (!(await settlesBefore(holder, waitUntil))) {
        emit('in_progress');
        throw new IdempotencyKeyInProgressError(retryAfterMs, {
          message: `A request with this idempotency key is still running after ${waitTimeoutMs} ms`,
        });
      }
    }
    const seen = await store.find(scope, key);
    readAt = new Date();
    if (seen && isLive(seen, readAt)) return answer(seen, readAt);
    // Another call of this process took the key while we read: wait for it, then read again.
    if (!holding.has(id)) break;
  }
  if (mode === 'lease') return runUnderLease(store.lease!);

  let resolverError: { error: unknown } | undefined;
  let claimedAt = readAt;
  // The wait for a concurrent holder is bounded here, around the whole transaction: a database
  // cannot roll back a transaction whose statement is still waiting for a lock, so an answer
  // that waited for the rollback would wait for the holder after all.
  let abandoned = false;
  let waitTimer: NodeJS.Timeout | undefined;
  const waited = new Promise<never>((_, reject) => {
    waitTimer = setTimeout(() => {
      abandoned = true;
      emit('in_progress');
      reject(
        new IdempotencyKeyInProgressError(retryAfterMs, {
          message: `A request with this idempotency key is still running after ${waitTimeoutMs} ms`,
        }),
      );
    }, waitTimeoutMs);
  });
  const transaction = store.transaction(async (session) => {
    resolverError = undefined;
    const now = new Date();
    const claim: NewClaim = {
      scope,
      key,
      operation,
      fingerprint: hash,
      now,
      expiresAt: new Date(now.getTime() + ttlMs),
    };
    const claimed = await session.claim(claim);
    // We already answered IN_PROGRESS: roll back without running anything.
    if (abandoned) throw new AbandonedClaim();
    clearTimeout(waitTimer);
    if (!claimed.claimed) {
      if (isLive(claimed.existing, now))
        return { kind: 'existing' as const, existing: claimed.existing, now };
      await session.takeOver(claim);
      emit('expired_takeover');
    } else {
      emit('claimed');
    }
    claimedAt = now;
    const info: ClaimInfo = { scope, key, operation, fingerprint: hash, firstSeenAt: now };
    let value: T;
    try {
      value = await resolver(session.tx, info);
    } catch (error) {
      resolverError = { error };
      throw error;
    }
    const text = storedText(serializer, value, maxResultBytes);
    const completedAt = new Date();
    const expiresAt = new Date(completedAt.getTime() + ttlMs);
    await session.complete({ scope, key, result: text, resultIsError: false, completedAt, expiresAt });
    return { kind: 'ran' as const, value, record: { ...info, completedAt, expiresAt } };
  });
  // Once abandoned, nobody awaits the transaction; its rollback must not go unhandled.
  transaction.catch(() => undefined);
  let settle = () => {};
  holding.set(
    id,
    new Promise<void>((resolve) => {
      settle = resolve;
    }),
  );
  try {
    const outcome = await Promise.race([transaction, waited]);
    if (outcome.kind === 'existing') return answer(outcome.existing, outcome.now);
    emit('completed');
    return { value: outcome.value, replayed: false, record: outcome.record };
  } catch (error) {
    if (resolverError?.error === error && replayErrors?.(error)) {
      await storeError(error);
    }
    throw error;
  } finally {
    clearTimeout(waitTimer);
    holding.delete(id);
    settle();
  }

  /**
   * The failed transaction rolled back the resolver's writes; the error is kept in a transaction
   * of its own, which claims the key again (or takes over an expired record), unless a retry
   * already claimed it in between.
   */
  async function storeError(error: unknown): Promise<void> {
    const text = encodeError(error);
    if (text === undefined) return; // Unstorable: the key simply stays retryable.
    const stored = await store.transaction(async (session) => {
      const completedAt = new Date();
      const expiresAt = new Date(completedAt.getTime() + ttlMs);
      // First seen when the failed call claimed the key.
      const claim: NewClaim = { scope, key, operation, fingerprint: hash, now: claimedAt, expiresAt };
      const claimed = await session.claim(claim);
      if (!claimed.claimed) {
        if (isLive(claimed.existing, completedAt)) return false;
        await session.takeOver(claim);
      }
      await session.complete({ scope, key, result: text, resultIsError: true, completedAt, expiresAt });
      return true;
    });
    if (stored) emit('completed');
  }

  /** A replayable error as stored text, or `undefined` when it cannot be stored. */
  function encodeError(error: unknown): string | undefined {
    try {
      return storedText(serializer, errorCodec.encode(error), maxResultBytes);
    } catch {
      return undefined;
    }
  }

  /**
   * Lease mode: the claim commits on its own, the resolver runs outside any transaction, and the
   * result is stored only while the owner token still holds the key.
   */
  async function runUnderLease(lease: LeaseOperations<Tx>): Promise<IdempotentResult<T>> {
    const ownerToken = randomBytes(32).toString('hex');
    const owner = { scope, key, ownerToken };
    let now = new Date();
    for (let attempt = 0; ; attempt++) {
      now = new Date();
      const outcome = await lease.claim({
        ...owner,
        operation,
        fingerprint: hash,
        now,
        expiresAt: new Date(now.getTime() + ttlMs),
        lockedUntil: new Date(now.getTime() + leaseMs),
      });
      if (outcome.claimed) {
        emit(outcome.tookOver ? 'expired_takeover' : 'claimed');
        break;
      }
      // A record that stopped being live between the store's statements is worth another claim;
      // one that keeps doing so is never replayed (it has expired): the caller retries later.
      const readAt = new Date();
      if (isLive(outcome.existing, readAt)) return answer(outcome.existing, readAt);
      if (attempt >= 2) {
        emit('in_progress');
        throw new IdempotencyKeyInProgressError(retryAfterMs, {
          message: 'The idempotency key changed hands while this request claimed it: retry with the same key',
        });
      }
    }

    let fenced = false;
    const reportFenced = () => {
      if (!fenced) emit('fenced');
      fenced = true;
    };
    const heartbeat = startHeartbeat(lease, owner, leaseMs, heartbeatMs, reportFenced);
    const info: ClaimInfo = { scope, key, operation, fingerprint: hash, firstSeenAt: now };
    let value: T;
    let text: string;
    try {
      value = await resolver(lease.client, info);
    } catch (error) {
      await heartbeat.stop();
      const stored = replayErrors?.(error) ? encodeError(error) : undefined;
      if (stored !== undefined) {
        await complete(stored, true, error);
        throw error;
      }
      await release();
      throw error;
    }
    await heartbeat.stop();
    try {
      text = storedText(serializer, value, maxResultBytes);
    } catch (error) {
      // The effects happened but the result cannot be kept: free the key rather than hold it.
      await release();
      throw error;
    }
    const record = await complete(text, false, undefined);
    return { value, replayed: false, record: { ...info, ...record } };

    async function complete(result: string, resultIsError: boolean, cause: unknown) {
      const completedAt = new Date();
      const expiresAt = new Date(completedAt.getTime() + ttlMs);
      if (await lease.complete({ ...owner, result, resultIsError, completedAt, expiresAt })) {
        emit('completed');
        return { completedAt, expiresAt };
      }
      reportFenced();
      const current = await store.find(scope, key).catch(() => null);
      const retryAfter =
        current?.status === 'IN_PROGRESS' && current.lockedUntil
          ? current.lockedUntil.getTime() - Date.now()
          : 0;
      throw new IdempotencyLeaseLostError(retryAfter, { cause });
    }

    /** Frees the key for a retry; the resolver's error stays the answer even if this fails. */
    async function release(): Promise<void> {
      try {
        if (await lease.release(owner)) emit('released');
        else reportFenced();
      } catch {
        // The lease runs out on its own and the next request takes over.
      }
    }
  }
}

/**
 * The scope records are kept under. An empty string stands for the global scope, so a scope
 * function must return a non-empty value for real principals.
 */
export function resolveScope(scope: unknown, allowGlobalScope: boolean): string {
  if (typeof scope === 'number' || typeof scope === 'bigint') return String(scope);
  if (typeof scope === 'string' && scope.length > 0) {
    if (scope.length > 255) throw new TypeError('The idempotency scope is longer than 255 characters');
    return scope;
  }
  if ((scope === null || scope === undefined) && allowGlobalScope) return '';
  throw new TypeError(
    `The idempotency scope must be a non-empty string or a number (got ${scope === '' ? 'an empty string' : String(scope)}); ` +
      'return the principal from `scope`, or set `allowGlobalScope: true` to share keys across everybody',
  );
}

function checkLeaseOptions(store: Store<unknown>, leaseMs: number, heartbeatMs: number | undefined): void {
  if (!store.lease) throw new TypeError("This store does not support mode: 'lease'");
  if (!Number.isFinite(leaseMs) || leaseMs <= 0) throw new RangeError('leaseMs must be a positive number');
  if (heartbeatMs !== undefined && !(heartbeatMs > 0 && heartbeatMs < leaseMs)) {
    throw new RangeError('heartbeatMs must be positive and shorter than leaseMs');
  }
}

/**
 * Extends the lease every `heartbeatMs` while the resolver runs. `stop` waits for a beat in
 * flight, so a late beat can never be mistaken for losing the lease after completion.
 */
function startHeartbeat(
  lease: LeaseOperations<unknown>,
  owner: { scope: string; key: string; ownerToken: string },
  leaseMs: number,
  heartbeatMs: number | undefined,
  onLost: () => void,
): { stop(): Promise<void> } {
  if (heartbeatMs === undefined) return { stop: async () => undefined };
  let beat: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    beat = beat.then(async () => {
      try {
        if (!(await lease.extend(owner, new Date(Date.now() + leaseMs)))) {
          clearInterval(timer);
          onLost();
        }
      } catch {
        // A missed beat: the next one tries again, and the completion is fenced in any case.
      }
    });
  }, heartbeatMs);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await beat;
    },
  };
}

function infoOf(record: StoredRecord, hash: string): RecordInfo {
  return {
    scope: record.scope,
    key: record.key,
    operation: record.operation,
    fingerprint: hash,
    firstSeenAt: record.createdAt,
    completedAt: record.completedAt ?? record.createdAt,
    expiresAt: record.expiresAt,
  };
}

/**
 * The text a result is stored as, once it is known to fit and to come back: a result that could
 * not be replayed fails now, before anything commits, rather than on every retry.
 */
function storedText(serializer: Serializer, value: unknown, maxResultBytes: number): string {
  const text = serializer.serialize(value);
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > maxResultBytes) throw new IdempotencyResultTooLargeError(bytes, maxResultBytes);
  try {
    serializer.deserialize(text);
  } catch (cause) {
    throw new TypeError(`The result could not be replayed: ${(cause as Error).message}`, { cause });
  }
  return text;
}

/**
 * Per store backend, the keys held by a transactional call of this process, each with a promise
 * that settles once that call has committed or rolled back (and stored a replayable error).
 */
const holders = new WeakMap<object, Map<string, Promise<void>>>();

function holdersOf(backend: object): Map<string, Promise<void>> {
  let held = holders.get(backend);
  if (!held) {
    held = new Map();
    holders.set(backend, held);
  }
  return held;
}

/** Whether `promise` settles before `deadline` (a `performance.now()` time). */
async function settlesBefore(promise: Promise<void>, deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, deadline - performance.now()), false);
  });
  try {
    return await Promise.race([promise.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Thrown inside a transaction whose caller already got `IDEMPOTENCY_KEY_IN_PROGRESS`. */
class AbandonedClaim extends Error {
  override name = 'AbandonedClaim';
}

/** Keeps `name`, `message` and `code`; rebuilds a plain `Error` carrying them. */
export const defaultErrorCodec: ErrorCodec = {
  encode(error) {
    const { name, message, code } = error as { name?: unknown; message?: unknown; code?: unknown };
    return {
      name: typeof name === 'string' ? name : 'Error',
      message: typeof message === 'string' ? message : String(error),
      ...(typeof code === 'string' || typeof code === 'number' ? { code } : {}),
    };
  },
  decode(stored) {
    const { name, message, code } = stored as { name: string; message: string; code?: string | number };
    const error = new Error(message) as Error & { code?: string | number };
    error.name = name;
    if (code !== undefined) error.code = code;
    return error;
  },
};
