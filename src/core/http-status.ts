import { type IdempotencyError, type IdempotencyKeyInProgressError, statusOf } from './errors.js';

/** How an HTTP response answers one of our errors. */
export interface HttpAnswer {
  /** 400, 409, 422, 500 or 503 (see `statusOf`). */
  status: number;
  /** `Retry-After` (whole seconds) for `IDEMPOTENCY_KEY_IN_PROGRESS`; absent otherwise. */
  headers?: Record<string, string>;
}

/** The status and headers that stand for `error`, whichever integration answers it. */
export function httpAnswerOf(error: IdempotencyError): HttpAnswer {
  const status = statusOf[error.code];
  if (error.code !== 'IDEMPOTENCY_KEY_IN_PROGRESS') return { status };
  const { retryAfterSeconds } = error as IdempotencyKeyInProgressError;
  // A copy rebuilt by an error codec may have lost its hint: no header rather than "undefined".
  if (!Number.isFinite(retryAfterSeconds)) return { status };
  return { status, headers: { 'Retry-After': String(retryAfterSeconds) } };
}
