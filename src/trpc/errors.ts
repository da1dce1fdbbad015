import { getTRPCErrorFromUnknown, type TRPC_ERROR_CODE_KEY, TRPCError } from '@trpc/server';
import {
  type IdempotencyError,
  type IdempotencyErrorCode,
  type IdempotencyKeyInProgressError,
  isIdempotencyError,
} from '../core/errors.js';
import { defaultErrorCodec, type ErrorCodec } from '../core/run-idempotent.js';

/** The `TRPCError` code each idempotency code maps to (the HTTP status tRPC sends follows from it). */
export const trpcCodeOf: Readonly<Record<IdempotencyErrorCode, TRPC_ERROR_CODE_KEY>> = {
  IDEMPOTENCY_KEY_MISSING: 'BAD_REQUEST',
  IDEMPOTENCY_KEY_INVALID: 'BAD_REQUEST',
  IDEMPOTENCY_INPUT_UNSUPPORTED: 'BAD_REQUEST',
  IDEMPOTENCY_KEY_MISMATCH: 'UNPROCESSABLE_CONTENT',
  IDEMPOTENCY_KEY_IN_PROGRESS: 'CONFLICT',
  IDEMPOTENCY_RESULT_TOO_LARGE: 'INTERNAL_SERVER_ERROR',
  IDEMPOTENCY_RESULT_UNSTORABLE: 'INTERNAL_SERVER_ERROR',
  IDEMPOTENCY_STORE_UNAVAILABLE: 'SERVICE_UNAVAILABLE',
  IDEMPOTENCY_TRANSACTION_EXPIRED: 'SERVICE_UNAVAILABLE',
  IDEMPOTENCY_OUTCOME_UNKNOWN: 'INTERNAL_SERVER_ERROR',
  IDEMPOTENCY_STEP_DIVERGED: 'INTERNAL_SERVER_ERROR',
};

/** The `TRPCError` a client receives for an idempotency error; the original is its `cause`. */
export function toTRPCError(error: IdempotencyError): TRPCError {
  return new TRPCError({ code: trpcCodeOf[error.code], message: error.message, cause: error });
}

/** What `idempotencyErrorFormatter` adds to `shape.data`. */
export interface IdempotencyErrorData {
  /**
   * The stable code to branch on, e.g. `IDEMPOTENCY_KEY_MISMATCH`; `null` for any other error
   * (which tells `idempotencyLink` that a 409 or 503 is the application's own: not retried).
   */
  idempotencyCode: IdempotencyErrorCode | null;
  /** With `IDEMPOTENCY_KEY_IN_PROGRESS`: how long to wait before retrying with the same key. */
  retryAfterMs?: number;
  /**
   * `true` when an `.input()` validator refused the call's input (`isInputRefusal`): the resolver
   * did not run. `idempotencyLink` explains such a refusal of a mutation it sent `{ idempotencyKey }`
   * as its whole input; any other `BAD_REQUEST` is the application's, passed on as it is.
   */
  inputRefused?: true;
}

/** The idempotency facts of a `TRPCError`: a `null` code unless its `cause` is an idempotency error. */
export function idempotencyErrorData(error: TRPCError): IdempotencyErrorData {
  const cause = error.cause;
  if (!isIdempotencyError(cause)) {
    return isInputRefusal(error) ? { idempotencyCode: null, inputRefused: true } : { idempotencyCode: null };
  }
  if (cause.code === 'IDEMPOTENCY_KEY_IN_PROGRESS') {
    return {
      idempotencyCode: cause.code,
      retryAfterMs: (cause as IdempotencyKeyInProgressError).retryAfterMs,
    };
  }
  return { idempotencyCode: cause.code };
}

/**
 * An `errorFormatter` that puts the idempotency code (and the retry hint of a 409) in
 * `shape.data`, so clients can branch on `error.data.idempotencyCode`. Use it as is,
 * `initTRPC.create({ errorFormatter: idempotencyErrorFormatter })`, or call it from your own.
 */
export function idempotencyErrorFormatter<Shape extends { data: object }>(opts: {
  shape: Shape;
  error: TRPCError;
}): Shape & { data: Shape['data'] & IdempotencyErrorData } {
  return { ...opts.shape, data: { ...opts.shape.data, ...idempotencyErrorData(opts.error) } };
}

/**
 * Stores a replayable resolver error as its tRPC code and message, with its `cause` (what the
 * resolver threw, when tRPC wrapped it) as the core's codec keeps errors (name, message, code); a
 * replay is a `TRPCError` with the same code, message and such a cause, so the client sees the same
 * status and an error formatter reading `error.cause` gives the same answer. An idempotency error
 * the core keeps for the key (in lease mode, a result too large to store) is kept as the core keeps
 * it, so its replay carries its idempotency code as the first answer did.
 */
export const trpcErrorCodec: ErrorCodec = {
  encode(error) {
    if (isIdempotencyError(error)) return { idempotencyError: defaultErrorCodec.encode(error) };
    const { code, message, cause } = getTRPCErrorFromUnknown(error);
    return { code, message, ...(cause !== undefined && { cause: defaultErrorCodec.encode(cause) }) };
  },
  decode(stored) {
    const { idempotencyError } = stored as { idempotencyError?: unknown };
    if (idempotencyError !== undefined) return defaultErrorCodec.decode(idempotencyError);
    const { code, message, cause } = stored as {
      code: TRPC_ERROR_CODE_KEY;
      message: string;
      cause?: unknown;
    };
    return new TRPCError({
      code,
      message,
      cause: cause === undefined ? undefined : defaultErrorCodec.decode(cause),
    });
  },
};

/**
 * tRPC's refusal of an input by an `.input()` validator: a `BAD_REQUEST` whose cause lists the
 * validator's `issues` (Standard Schema: zod, Valibot), or its `arkErrors` (ArkType, whose own
 * `assert` tRPC calls). The resolver never ran.
 */
export function isInputRefusal(error: unknown): boolean {
  if (!(error instanceof TRPCError) || error.code !== 'BAD_REQUEST') return false;
  const cause = error.cause as { issues?: unknown; arkErrors?: unknown } | undefined;
  return Array.isArray(cause?.issues) || Array.isArray(cause?.arkErrors);
}
