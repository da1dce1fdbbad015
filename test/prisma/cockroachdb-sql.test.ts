import { describe, expect, it } from 'vitest';
import { adapterForUrl, providerOfUrl } from '../../src/prisma/adapter-for-url.js';
import { databaseClock } from '../../src/prisma/database-clock.js';
import { sweepStatement } from '../../src/prisma/maintenance-sql.js';
import { recordStatements } from '../../src/prisma/record-sql.js';
import { textFor } from '../../src/prisma/sql.js';

// CockroachDB cannot run here: these pin the SQL the store and the CLI send it, which its
// PostgreSQL dialect accepts, and what they leave out. serialization-retries.test.ts runs the
// store with this SQL on PostgreSQL, with CockroachDB's 40001 raised by a trigger.
describe('CockroachDB', () => {
  it.each(['cockroachdb://root@127.0.0.1:26257/app?sslmode=disable', 'cockroach://root@127.0.0.1:26257/app'])(
    'is the provider of %s, reached through adapter-pg',
    async (url) => {
      expect(providerOfUrl(url)).toBe('cockroachdb');
      const adapter = await adapterForUrl(url);
      expect(adapter.adapterName).toBe('@prisma/adapter-pg');
    },
  );

  it('keeps postgresql:// URLs PostgreSQL’s (CockroachDB’s own URLs say postgresql://)', () => {
    expect(providerOfUrl('postgresql://root@127.0.0.1:26257/app')).toBe('postgresql');
  });

  it('claims with INSERT … ON CONFLICT DO NOTHING RETURNING and numbered parameters', () => {
    const { text } = recordStatements('cockroachdb').claim({
      scope: 's',
      key: 'k',
      operation: 'o',
      fingerprint: 'f',
      ttlMs: 1_000,
    } as never);
    const sent = textFor('cockroachdb', text);
    expect(sent).toMatch(/ON CONFLICT \(scope, idempotency_key\) DO NOTHING RETURNING created_at$/);
    expect(sent).toContain('$1');
    expect(sent).not.toContain('?');
  });

  it('reads time from statement_timestamp(), in UTC, as for PostgreSQL', () => {
    expect(databaseClock('cockroachdb')).toBe(databaseClock('postgresql'));
    expect(databaseClock('cockroachdb').now).toContain('statement_timestamp()');
  });

  it('sweeps without FOR UPDATE SKIP LOCKED, re-checking expiry on the rows it deletes', () => {
    const sweep = sweepStatement('cockroachdb', 500);
    expect(sweep).not.toContain('SKIP LOCKED');
    expect(sweepStatement('postgresql', 500)).toContain('FOR UPDATE SKIP LOCKED');
    expect(sweep).toMatch(/LIMIT 500\) AND /);
  });
});
