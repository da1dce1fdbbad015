import type { CallTracking } from './call-tracking.js';
import type { RecordRequest } from './decide.js';
import {
  carriesIdempotencyError,
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  IdempotencyResultTooLargeError,
  IdempotencyResultUnstorableError,
  isMisuse,
} from './errors.js';
import type { IdempotencyEventType } from './events.js';
import type { Serializer } from './serializer.js';
import type { Step } from './steps.js';
import type { Completed, Store, StoredRecord } from './store.js';
import { withMembers } from './with-members.js';

/** Turns a resolver's error into something storable, and a stored one back into an error. */
export interface ErrorCodec {
  encode(error: unknown): unknown;
  decode(stored: unknown): Error;
}

/** What the resolver is told about the claim it runs under. */
export interface ClaimInfo {
  scope: string;
  key: string;
  operation: string;
  fingerprint: string;
  /** When the key was claimed, by the store's clock. */
  firstSeenAt: Date;
}

/** The stored record's public facts (times by the store's clock), returned with every result. */
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

/** What the resolver receives besides the store's client: the claim, and in lease mode `step`. */
export interface ResolverClaim<Tx> extends ClaimInfo {
  /**
   * Lease mode: runs a durable step (see `Step`): at most once per `(scope, key, name)`, its
   * result stored before the resolver goes on and replayed on a retry. `undefined` in
   * transactional mode, where the whole resolver commits or rolls back as one.
   */
  step?: Step<Tx>;
}

/** The resolver a call runs at most once: it receives the store's client and the claim. */
export type Resolver<T, Tx> = (tx: Tx, claim: ResolverClaim<Tx>) => Promise<T> | T;

/** One call, its options resolved and checked: what the runners work from. */
export interface Call<T, Tx> {
  store: Store<Tx>;
  request: RecordRequest;
  resolver: Resolver<T, Tx>;
  ttlMs: number;
  leaseMs: number;
  heartbeatMs: number | undefined;
  maxLeaseMs: number;
  maxResultBytes: number;
  waitTimeoutMs: number;
  /** When (on `clock`) a duplicate stops waiting for the call holding its key: `waitTimeoutMs` after the call began. */
  waitDeadline: number;
  retryAfterMs: number;
  serializer: Serializer;
  /**
   * Whether a resolver's (or a step's) error is stored and replayed; never throws (`replayPolicy`).
   * `undefined` when the call replays no error.
   */
  replayErrors: ((error: unknown) => boolean) | undefined;
  errorCodec: ErrorCodec;
  /** The client has not sent the key before: no read outside the claim (`RunIdempotentOptions.firstAttempt`). */
  firstAttempt: boolean;
  /** Milliseconds on a monotonic clock: waits, the lease's cap, durations. Never liveness. */
  clock: () => number;
  emit: (type: IdempotencyEventType) => void;
  /** The observer's view of the call; `undefined` (and free) when `observe` is unset. */
  tracking: CallTracking | undefined;
}

/**
 * Answers from a live record that is not this call's: replays it (or throws the error it
 * stores), or throws `IDEMPOTENCY_KEY_MISMATCH` / `IDEMPOTENCY_KEY_IN_PROGRESS`.
 */
export function answer<T, Tx>(
  call: Call<T, Tx>,
  record: StoredRecord,
  decision: { kind: 'replay' } | { kind: 'mismatch' } | { kind: 'inProgress'; retryAfterMs: number },
): IdempotentResult<T> {
  if (decision.kind === 'mismatch') {
    call.emit('mismatch');
    throw new IdempotencyKeyMismatchError(record.createdAt);
  }
  if (decision.kind === 'inProgress') {
    call.emit('in_progress');
    throw new IdempotencyKeyInProgressError(decision.retryAfterMs);
  }
  call.emit('replayed');
  const value = call.serializer.deserialize(record.result ?? '');
  if (record.resultIsError) throw call.errorCodec.decode(value);
  return {
    value: value as T,
    replayed: true,
    record: {
      scope: record.scope,
      key: record.key,
      operation: record.operation,
      fingerprint: record.fingerprint,
      firstSeenAt: record.createdAt,
      completedAt: record.completedAt ?? record.createdAt,
      expiresAt: record.expiresAt,
    },
  };
}

/** The facts of the record this call stored, as the store keeps them. */
export function ranRecord<T, Tx>(call: Call<T, Tx>, firstSeenAt: Date, completed: Completed): RecordInfo {
  const { completedAt, expiresAt } = completed;
  return withMembers(call.request, { firstSeenAt, completedAt, expiresAt });
}

/**
 * The text a result is stored as, once it is known to fit and to come back: a result that could
 * not be replayed fails now, before anything commits, rather than on every retry.
 */
export function storedText(serializer: Serializer, value: unknown, maxResultBytes: number): string {
  let known: string | undefined;
  let text: string;
  try {
    known = serializer.serializeKnown?.(value);
    text = known ?? serializer.serialize(value);
  } catch (cause) {
    throw new IdempotencyResultUnstorableError(
      `The result could not be stored for replay: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
  }
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > maxResultBytes) throw new IdempotencyResultTooLargeError(bytes, maxResultBytes);
  if (known !== undefined) return text;
  try {
    serializer.deserialize(text);
  } catch (cause) {
    throw new IdempotencyResultUnstorableError(
      `The result could not be replayed: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
  }
  return text;
}

/**
 * Room for the library's own error about a result it could not keep (too large, unstorable): a
 * `maxResultBytes` below this (a few hundred bytes) still keeps that error, or the key would be
 * run again once its lease ran out.
 */
export const OWN_ERROR_BYTES = 16_384;

/**
 * The user's `replayErrors` as the runners ask it. One that throws (written for a gateway's errors,
 * meeting another) accepts nothing: the resolver's own error stays the answer, and the claim is
 * released as for any error that is not replayed. Nor is an error of ours a resolver threw (a
 * nested call's, `carriesIdempotencyError`) ever kept: it speaks of another key, and a "still
 * running" kept as this key's answer would be replayed until the record expired; nor one the library
 * threw at code that calls it wrongly (`isMisuse`: a step started beside another), which a
 * fixed deploy must be able to run again.
 */
export function replayPolicy(
  replayErrors: ((error: unknown) => boolean) | undefined,
): ((error: unknown) => boolean) | undefined {
  if (!replayErrors) return undefined;
  return (error) => {
    if (carriesIdempotencyError(error) || isMisuse(error)) return false;
    try {
      return Boolean(replayErrors(error));
    } catch {
      return false;
    }
  };
}

/** A replayable error as stored text, or `undefined` when it cannot be stored in `maxBytes`. */
export function storedErrorText<T, Tx>(
  call: Call<T, Tx>,
  error: unknown,
  maxBytes = call.maxResultBytes,
): string | undefined {
  try {
    return storedText(call.serializer, call.errorCodec.encode(error), maxBytes);
  } catch {
    return undefined;
  }
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

/** Resolves after `ms`. */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The answer to a call that waited for its key's holder: without `cause`, for `waitTimeoutMs`. */
export function stillRunning<T, Tx>(call: Call<T, Tx>, cause?: unknown): IdempotencyKeyInProgressError {
  return new IdempotencyKeyInProgressError(call.retryAfterMs, {
    message:
      cause === undefined
        ? `A request with this idempotency key is still running after ${call.waitTimeoutMs} ms`
        : 'A request with this idempotency key is still running (the database stopped waiting for it)',
    cause,
  });
}

/**
 * What a store's claim failure answers: a claim the database stopped waiting for (the store throws
 * `IdempotencyKeyInProgressError`: nothing was written, and the key's holder is still running) as
 * the call's own wait running out, once `in_progress` is said; any other error as it is.
 */
export function claimFailure<T, Tx>(call: Call<T, Tx>, error: unknown): unknown {
  if (!(error instanceof IdempotencyKeyInProgressError)) return error;
  call.emit('in_progress');
  return stillRunning(call, error);
}
