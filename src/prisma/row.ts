import type { StoredRecord } from '../core/store.js';

/**
 * A row of `idempotency_records` as a record. Rows come back with driver-specific types: dates as
 * Date or text, booleans as 0/1.
 */
export function toRecord(row: Record<string, unknown>): StoredRecord {
  return {
    scope: String(row.scope),
    key: String(row.idempotency_key),
    operation: String(row.operation),
    fingerprint: String(row.fingerprint),
    status: row.status === 'COMPLETED' ? 'COMPLETED' : 'IN_PROGRESS',
    result: row.result === null || row.result === undefined ? null : String(row.result),
    resultIsError: row.result_is_error === true || Number(row.result_is_error) === 1,
    ownerToken: row.owner_token === null || row.owner_token === undefined ? null : String(row.owner_token),
    lockedUntil: toDate(row.locked_until),
    createdAt: toDate(row.created_at) ?? new Date(0),
    completedAt: toDate(row.completed_at),
    expiresAt: toDate(row.expires_at) ?? new Date(0),
    // NULL (an IN_PROGRESS record without a lease): not live. Drivers return numbers, strings or
    // decimals here.
    liveForMs: row.live_for_ms === null || row.live_for_ms === undefined ? 0 : Number(row.live_for_ms),
  };
}

/** A timestamp as the drivers return it (a Date, epoch milliseconds, or text) as a Date. */
export function toDate(value: unknown): Date | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return value;
  if (typeof value === 'number' || typeof value === 'bigint') return new Date(Number(value));
  const text = String(value);
  // SQLite's CURRENT_TIMESTAMP has no zone designator; it is UTC.
  return new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text.replace(' ', 'T')}Z`);
}
