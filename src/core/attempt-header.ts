import type { HeaderValue } from './key.js';

/**
 * The request header in which the shipped clients number their sends of a key they made: `1` on
 * the first, `2`, `3`… on retries. A key the caller supplied goes without it (it may have been sent
 * before). The server reads `1` as `firstAttempt` (no record to answer from: claim at once); any
 * other value, or none, changes nothing.
 */
export const ATTEMPT_HEADER = 'Idempotency-Attempt';

/**
 * Whether an `Idempotency-Attempt` header value says the client has not sent this key before:
 * exactly `1`, sent once. Absent, repeated, malformed or higher values are `false`, never an error:
 * the hint only saves a read, and a request must not fail over it.
 */
export function isFirstAttempt(value: HeaderValue): boolean {
  const single = typeof value === 'string' ? value : value?.length === 1 ? value[0] : undefined;
  return single?.trim() === '1';
}
