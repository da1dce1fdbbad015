/** The stable codes a client can branch on. Part of the public contract. */
export type IdempotencyErrorCode =
  | 'IDEMPOTENCY_KEY_MISSING'
  | 'IDEMPOTENCY_KEY_INVALID'
  | 'IDEMPOTENCY_KEY_MISMATCH'
  | 'IDEMPOTENCY_KEY_IN_PROGRESS'
  | 'IDEMPOTENCY_INPUT_UNSUPPORTED'
  | 'IDEMPOTENCY_RESULT_TOO_LARGE'
  | 'IDEMPOTENCY_RESULT_UNSTORABLE'
  | 'IDEMPOTENCY_STORE_UNAVAILABLE'
  | 'IDEMPOTENCY_TRANSACTION_EXPIRED'
  | 'IDEMPOTENCY_OUTCOME_UNKNOWN'
  | 'IDEMPOTENCY_STEP_DIVERGED';

/** The HTTP status each code stands for; the integrations map to their own error types from it. */
export const statusOf: Readonly<Record<IdempotencyErrorCode, number>> = {
  IDEMPOTENCY_KEY_MISSING: 400,
  IDEMPOTENCY_KEY_INVALID: 400,
  IDEMPOTENCY_INPUT_UNSUPPORTED: 400,
  IDEMPOTENCY_KEY_MISMATCH: 422,
  IDEMPOTENCY_KEY_IN_PROGRESS: 409,
  IDEMPOTENCY_RESULT_TOO_LARGE: 500,
  IDEMPOTENCY_RESULT_UNSTORABLE: 500,
  IDEMPOTENCY_STORE_UNAVAILABLE: 503,
  IDEMPOTENCY_TRANSACTION_EXPIRED: 503,
  IDEMPOTENCY_OUTCOME_UNKNOWN: 500,
  IDEMPOTENCY_STEP_DIVERGED: 500,
};

/** Base class of every error this library throws on purpose. */
export class IdempotencyError extends Error {
  override name = 'IdempotencyError';
  readonly code: IdempotencyErrorCode;

  constructor(code: IdempotencyErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  /** The HTTP status this error stands for (400, 409, 422, 500 or 503). */
  get status(): number {
    return statusOf[this.code];
  }
}

/** The operation requires a key and the request carried none. */
export class IdempotencyKeyMissingError extends IdempotencyError {
  override name = 'IdempotencyKeyMissingError';
  constructor(message = 'This operation requires an idempotency key', options?: { cause?: unknown }) {
    super('IDEMPOTENCY_KEY_MISSING', message, options);
  }
}

/** The key is malformed, ambiguous (several values) or disagrees between header and input. */
export class IdempotencyKeyInvalidError extends IdempotencyError {
  override name = 'IdempotencyKeyInvalidError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('IDEMPOTENCY_KEY_INVALID', message, options);
  }
}

/** The key was first used with another operation or input; the stored record is left untouched. */
export class IdempotencyKeyMismatchError extends IdempotencyError {
  override name = 'IdempotencyKeyMismatchError';
  /** When the key was first claimed. */
  readonly firstSeenAt: Date;
  constructor(firstSeenAt: Date, options?: { cause?: unknown; message?: string }) {
    super(
      'IDEMPOTENCY_KEY_MISMATCH',
      options?.message ?? 'This idempotency key was already used with a different operation or input',
      options,
    );
    this.firstSeenAt = firstSeenAt;
  }
}

/** Another request holds the key; retry after `retryAfterMs`. */
export class IdempotencyKeyInProgressError extends IdempotencyError {
  override name = 'IdempotencyKeyInProgressError';
  /** How long the caller should wait before retrying with the same key. */
  readonly retryAfterMs: number;
  constructor(retryAfterMs: number, options?: { cause?: unknown; message?: string }) {
    super(
      'IDEMPOTENCY_KEY_IN_PROGRESS',
      options?.message ?? 'A request with this idempotency key is still in progress',
      options,
    );
    this.retryAfterMs = Math.max(0, Math.ceil(retryAfterMs));
  }

  /** The `Retry-After` header value, in whole seconds (at least 1). */
  get retryAfterSeconds(): number {
    return Math.max(1, Math.ceil(this.retryAfterMs / 1000));
  }
}

/**
 * Lease mode: the lease ran out while the resolver ran and another request took the key over, so
 * this request's result was not stored (it was fenced by the owner token). Same code and status as
 * `IdempotencyKeyInProgressError`: a client retries with the same key and receives whatever the
 * new owner stores. The resolver's side effects did happen; choose `leaseMs` (or a heartbeat) to
 * outlast the slowest resolver.
 */
export class IdempotencyLeaseLostError extends IdempotencyKeyInProgressError {
  override name = 'IdempotencyLeaseLostError';
  constructor(retryAfterMs: number, options?: { cause?: unknown }) {
    super(retryAfterMs, {
      ...options,
      message:
        'The lease on this idempotency key ran out while the mutation ran and another request took it over; ' +
        'this result was not stored. Retry with the same key to receive the stored result',
    });
  }
}

/** The input cannot be fingerprinted (too deep, circular, a function, ...). */
export class IdempotencyInputError extends IdempotencyError {
  override name = 'IdempotencyInputError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('IDEMPOTENCY_INPUT_UNSUPPORTED', message, options);
  }
}

/**
 * The serialized result is over `maxResultBytes`. Transactional mode: nothing committed. Lease
 * mode: the effects happened, and this error is what the key replays from now on.
 */
export class IdempotencyResultTooLargeError extends IdempotencyError {
  override name = 'IdempotencyResultTooLargeError';
  readonly bytes: number;
  readonly maxBytes: number;
  constructor(bytes: number, maxBytes: number, options?: { cause?: unknown }) {
    super(
      'IDEMPOTENCY_RESULT_TOO_LARGE',
      `The result is ${bytes} bytes serialized, over maxResultBytes (${maxBytes}): it cannot be stored for replay`,
      options,
    );
    this.bytes = bytes;
    this.maxBytes = maxBytes;
  }
}

/**
 * The result cannot be stored so that it replays (a `__proto__` key, a value the serializer
 * refuses). Transactional mode: nothing committed. Lease mode: the effects happened, so this error
 * is what the key replays from now on, rather than freeing the key to run them again.
 */
export class IdempotencyResultUnstorableError extends IdempotencyError {
  override name = 'IdempotencyResultUnstorableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('IDEMPOTENCY_RESULT_UNSTORABLE', message, options);
  }
}

/**
 * The store could not be reached, or lost its connection: the mutation did not run, or ran and rolled
 * back (transactional mode), so a retry with the same key is safe.
 */
export class IdempotencyStoreUnavailableError extends IdempotencyError {
  override name = 'IdempotencyStoreUnavailableError';
  constructor(message = 'The idempotency store is unavailable', options?: { cause?: unknown }) {
    super('IDEMPOTENCY_STORE_UNAVAILABLE', message, options);
  }
}

/** Whether `error` is one of ours (works across duplicated copies of the package, by `code`). */
export function isIdempotencyError(error: unknown): error is IdempotencyError {
  return (
    error instanceof IdempotencyError ||
    (error instanceof Error &&
      typeof (error as Error & { code?: unknown }).code === 'string' &&
      Object.hasOwn(statusOf, (error as Error & { code: string }).code))
  );
}

/**
 * Whether `error` is, or was caused by (its `cause` chain), one of our errors: thrown by a
 * resolver, it is a nested call's answer about another key (a 409 of a call it made), never this
 * call's own: not replayed for this key, and never answered with the retryable status it had there.
 */
export function carriesIdempotencyError(error: unknown): boolean {
  let node = error;
  for (let depth = 0; depth < 10 && typeof node === 'object' && node !== null; depth++) {
    if (isIdempotencyError(node)) return true;
    node = (node as { cause?: unknown }).cause;
  }
  return false;
}

/** Errors the library threw at code that calls it wrongly (a step started beside another). */
const misuses = new WeakSet<object>();

/**
 * `error`, marked as one the library throws at code that calls it wrongly (a step started beside
 * another, or after the resolver returned): the code's mistake, never kept as a key's outcome,
 * whatever `replayErrors` says, so a fixed deploy runs the call again.
 */
export function misuse<E extends Error>(error: E): E {
  misuses.add(error);
  return error;
}

/**
 * Whether the library threw `error` at code that calls it wrongly (`misuse`), or `error` wraps such
 * an error: through its `cause` (a resolver that wraps what it caught) or its `originalError` (a
 * `GraphQLError`), at any depth.
 */
export function isMisuse(error: unknown, depth = 0): boolean {
  if (depth > 10 || typeof error !== 'object' || error === null) return false;
  if (misuses.has(error)) return true;
  const { cause, originalError } = error as { cause?: unknown; originalError?: unknown };
  return isMisuse(cause, depth + 1) || isMisuse(originalError, depth + 1);
}

/**
 * The store's transaction ran out of time (its `timeout`) before it committed: everything it did
 * rolled back, so the call can be retried with the same key.
 */
export class IdempotencyTransactionExpiredError extends IdempotencyError {
  override name = 'IdempotencyTransactionExpiredError';
  constructor(
    message = 'The idempotency transaction expired before it committed; nothing was kept',
    options?: { cause?: unknown },
  ) {
    super('IDEMPOTENCY_TRANSACTION_EXPIRED', message, options);
  }
}

/**
 * Lease mode: the resolver ran (its effects outside the database may have happened) but its result
 * could not be stored, even after retrying while the lease was held. Clients must not retry this by
 * themselves: a retry after the lease ends would run the effects again. Check the effect (e.g. the
 * payment gateway's record for the key) before retrying, or retry with the same key once the store
 * is back if the effect is itself idempotent.
 */
export class IdempotencyOutcomeUnknownError extends IdempotencyError {
  override name = 'IdempotencyOutcomeUnknownError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('IDEMPOTENCY_OUTCOME_UNKNOWN', message, options);
  }
}

/**
 * Lease mode: a resumed call's steps did not run in the order, or with the names, of the steps
 * stored under its key (the code changed between the first attempt and the retry, or a step's name
 * depends on something other than the input). Nothing was stored and no step ran; the steps that
 * were stored stay, so a retry with the old order resumes.
 */
export class IdempotencyStepDivergedError extends IdempotencyError {
  override name = 'IdempotencyStepDivergedError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('IDEMPOTENCY_STEP_DIVERGED', message, options);
  }
}
