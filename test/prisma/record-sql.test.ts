import { describe, expect, it } from 'vitest';
import { recordStatements } from '../../src/prisma/record-sql.js';
import { storeTables } from '../../src/prisma/records-table.js';

// The store keeps each statement's text from its first build (`fixedTexts`): that holds only while
// no text depends on the values. Each statement is built first with one set of values and, on
// another store's statements, first with another where every value differs.
const one = {
  scope: 's1',
  key: 'k1',
  operation: 'o1',
  fingerprint: 'f1',
  ttlMs: 1_000,
  leaseMs: 10,
  ownerToken: 't1',
  result: '{"json":1}',
  resultIsError: false,
};
const other = {
  scope: 'scope 2',
  key: 'key 2',
  operation: 'op 2',
  fingerprint: 'fp 2',
  ttlMs: 2_000,
  leaseMs: 20,
  ownerToken: 'token 2',
  result: '{"json":"two"}',
  resultIsError: true,
};
type Values = typeof one;

const everyStatement = (statements: ReturnType<typeof recordStatements>, v: Values) => [
  statements.find(v.scope, v.key),
  statements.findLocked(v.scope, v.key),
  statements.createdAt(v.scope, v.key),
  statements.completedTimes(v.scope, v.key),
  statements.claim(v),
  statements.takeOver(v),
  statements.complete(v),
  statements.leaseClaim(v),
  statements.leaseTakeOver(v),
  statements.leaseExtend(v, v.leaseMs),
  statements.leaseComplete(v),
  statements.leaseRelease(v),
];

describe.each(['postgresql', 'cockroachdb', 'mysql', 'sqlite'] as const)(
  'the record statements on %s',
  (provider) => {
    it('have one text whatever their values', () => {
      const texts = (v: Values) => everyStatement(recordStatements(provider), v).map(({ text }) => text);
      expect(texts(other)).toEqual(texts(one));
    });

    it("name their store's table, whatever another store's statements were built on first", () => {
      const custom = storeTables(provider, 'App.payment records').records;
      const statements = recordStatements(provider);
      everyStatement(statements, one);
      const customTexts = everyStatement(recordStatements(provider, custom), other).map(({ text }) => text);
      for (const text of customTexts) {
        expect(text).toContain(custom);
        expect(text).not.toMatch(/\bidempotency_records\b/);
      }
      expect(customTexts).toEqual(
        everyStatement(recordStatements(provider, custom), one).map(({ text }) => text),
      );
      for (const { text } of everyStatement(statements, other)) expect(text).not.toContain(custom);
    });

    it('carry each call its own values, after the first', () => {
      const statements = recordStatements(provider);
      everyStatement(statements, one);
      expect(everyStatement(statements, other)).toEqual(everyStatement(recordStatements(provider), other));
    });
  },
);
