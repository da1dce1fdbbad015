import { describe, expect, it } from 'vitest';
import { type Decision, decide, type StoredRecord } from '../../src/index.js';
import { storedRecord } from '../helpers/stored-record.js';

const request = { scope: 'user-1', key: 'k-1', operation: 'payments.create', fingerprint: 'a'.repeat(64) };

const record = (overrides: Partial<StoredRecord>) => storedRecord({ ...request, ...overrides });

describe('decide', () => {
  it.each<[string, StoredRecord | null, Decision]>([
    ['no record: claim the key', null, { kind: 'claim' }],
    ['a live completed record of the same input: replay it', record({}), { kind: 'replay' }],
    [
      'a live record of another input: mismatch',
      record({ fingerprint: 'b'.repeat(64) }),
      { kind: 'mismatch' },
    ],
    [
      'a live record of another operation: mismatch',
      record({ operation: 'payments.refund' }),
      { kind: 'mismatch' },
    ],
    [
      'a live IN_PROGRESS record: in progress, for the rest of its lease',
      record({ status: 'IN_PROGRESS', result: null, liveForMs: 1_234 }),
      { kind: 'inProgress', retryAfterMs: 1_234 },
    ],
    [
      'a live IN_PROGRESS record of another input: mismatch, not in progress',
      record({ status: 'IN_PROGRESS', fingerprint: 'b'.repeat(64) }),
      { kind: 'mismatch' },
    ],
    ['an expired completed record: take it over', record({ liveForMs: 0 }), { kind: 'takeOver' }],
    [
      'an expired record of another input: take it over (an expired record answers for nothing)',
      record({ liveForMs: -5, fingerprint: 'b'.repeat(64) }),
      { kind: 'takeOver' },
    ],
    [
      'an IN_PROGRESS record whose lease ran out: take it over',
      record({ status: 'IN_PROGRESS', liveForMs: -1 }),
      { kind: 'takeOver' },
    ],
    [
      'a record whose liveness is unknown (NaN): take it over',
      record({ liveForMs: Number.NaN }),
      { kind: 'takeOver' },
    ],
    [
      'a record of another key (a case-insensitive column): never used',
      record({ key: 'K-1' }),
      { kind: 'foreign' },
    ],
    [
      'a record of another scope, even expired: never used',
      record({ scope: 'User-1', liveForMs: -1 }),
      { kind: 'foreign' },
    ],
  ])('%s', (_, found, expected) => {
    expect(decide(found, request)).toEqual(expected);
  });
});
