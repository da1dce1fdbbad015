import type { StoredRecord } from './store.js';

/** What a request is: the record it wants, and what it would store there. */
export interface RecordRequest {
  scope: string;
  key: string;
  operation: string;
  fingerprint: string;
}

/**
 * What to do with the record found under a request's key:
 *
 * - `claim`: there is none; claim the key.
 * - `takeOver`: there is one, but it is no longer live (expired, or a lease that ran out).
 * - `replay`: a live completed record of the same operation and input.
 * - `mismatch`: a live record of another operation or input (`IDEMPOTENCY_KEY_MISMATCH`).
 * - `inProgress`: a live `IN_PROGRESS` record; its lease has `retryAfterMs` left.
 * - `foreign`: the store returned a record of another scope or key (a case- or
 *   accent-insensitive collation on the key columns): never used, whatever it holds.
 */
export type Decision =
  | { kind: 'claim' }
  | { kind: 'takeOver' }
  | { kind: 'replay' }
  | { kind: 'mismatch' }
  | { kind: 'inProgress'; retryAfterMs: number }
  | { kind: 'foreign' };

/** Decides what a request does with `record`. Pure: liveness comes from the store's clock. */
export function decide(record: StoredRecord | null, request: RecordRequest): Decision {
  if (record === null) return { kind: 'claim' };
  if (record.scope !== request.scope || record.key !== request.key) return { kind: 'foreign' };
  if (!(record.liveForMs > 0)) return { kind: 'takeOver' };
  if (record.operation !== request.operation || record.fingerprint !== request.fingerprint) {
    return { kind: 'mismatch' };
  }
  if (record.status === 'IN_PROGRESS') return { kind: 'inProgress', retryAfterMs: record.liveForMs };
  return { kind: 'replay' };
}

/** The error for a `foreign` record: the table's key columns are misconfigured. */
export function foreignRecordError(record: StoredRecord, request: RecordRequest): Error {
  // Which one differs, not their values: the message reaches logs and traces, where neither a
  // scope (a user) nor a raw key belongs.
  const which = record.scope === request.scope ? 'key' : 'scope';
  return new Error(
    `The idempotency store returned the record of another ${which}, equal to this request's but for ` +
      'case or accents: its scope and key columns compare case- or accent-insensitively, so two callers ' +
      'could share records. Give them a binary collation (utf8mb4_bin on MySQL/MariaDB, as the shipped ' +
      'migration does).',
  );
}
