/**
 * What happened to one request, for logs, metrics or tracing:
 *
 * - `claimed`: the key was free and this request claimed it; the resolver runs.
 * - `expired_takeover`: the key held an expired record or a lease that ran out, which this request
 *   replaced; the resolver runs.
 * - `completed`: the result (or a replayable error) was stored.
 * - `replayed`: a stored result was returned; the resolver did not run.
 * - `mismatch`: the key was used with another operation or input (`IDEMPOTENCY_KEY_MISMATCH`).
 * - `in_progress`: another request holds the key (`IDEMPOTENCY_KEY_IN_PROGRESS`).
 * - `released`: lease mode, the resolver failed and this request deleted its own claim, or, when
 *   the key holds durable steps, ended its lease (the record stays) so that a retry resumes them.
 * - `fenced`: lease mode, this request's lease was taken over by another request, so its
 *   completion, release or step record wrote nothing (at most once per request).
 * - `outcome_unknown`: lease mode, the resolver (or a step) ran but its result could not be
 *   stored, and no record will answer a retry for it; transactional mode, the store cannot tell
 *   what of the call committed (MariaDB: the database ended the transaction mid-call and the
 *   session went on outside it). The call answers `IDEMPOTENCY_OUTCOME_UNKNOWN`.
 */
export type IdempotencyEventType =
  | 'claimed'
  | 'replayed'
  | 'mismatch'
  | 'in_progress'
  | 'completed'
  | 'released'
  | 'fenced'
  | 'expired_takeover'
  | 'outcome_unknown';

/** One event passed to `onEvent`. */
export interface IdempotencyEvent {
  type: IdempotencyEventType;
  scope: string;
  key: string;
  operation: string;
  /** The mode the request ran in. */
  mode: 'transactional' | 'lease';
  /** Milliseconds since the request entered `runIdempotent`. */
  durationMs: number;
}

/** Receives every event; must not throw (errors it throws are swallowed). */
export type IdempotencyEventHandler = (event: IdempotencyEvent) => void;
