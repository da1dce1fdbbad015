import type { StoredRecord } from '../../src/index.js';

/** A record as a store returns it: by default a live completed one of `user-1`'s `k-1`. */
export function storedRecord(overrides: Partial<StoredRecord> = {}): StoredRecord {
  return {
    scope: 'user-1',
    key: 'k-1',
    operation: 'payments.create',
    fingerprint: 'a'.repeat(64),
    status: 'COMPLETED',
    result: '"ok"',
    resultIsError: false,
    ownerToken: null,
    lockedUntil: null,
    createdAt: new Date(0),
    completedAt: new Date(0),
    expiresAt: new Date(0),
    liveForMs: 60_000,
    ...overrides,
  };
}
