import { afterAll, beforeAll, expect, it } from 'vitest';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachServerDatabase, type TestDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';
import { insertSteps } from '../helpers/records.js';

const OLD = 'a'.repeat(64);
const NEW = 'b'.repeat(64);
const FINGERPRINT = 'f'.repeat(64);

/**
 * A lease owner's step writes are fenced by its owner token even while another request's takeover
 * is not yet committed, at READ COMMITTED (PostgreSQL's default, and a common MariaDB setting): the
 * write waits for the takeover and then sees it.
 */
// SQLite has one writer: no takeover can be pending while a step is written.
describeEachServerDatabase('step writes of a stale owner, at READ COMMITTED', staleOwnerSuite);

function staleOwnerSuite(db: TestDatabase) {
  // Collected even when skipped (no URL): the URL is only read when there is one.
  const readCommitted: TestDatabase =
    db.provider === 'mysql' && db.url
      ? {
          ...db,
          url: `${db.url}${db.url.includes('?') ? '&' : '?'}initSql=${encodeURIComponent("SET/**/SESSION/**/tx_isolation='READ-COMMITTED'")}`,
        }
      : db;
  let prisma: Awaited<ReturnType<typeof connect>>;
  let other: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    [prisma, other] = await Promise.all([connect(readCommitted), connect(db)]);
  });
  afterAll(async () => {
    await Promise.all([prisma?.$disconnect(), other?.$disconnect()]);
  });

  /** Runs `write` while another request's takeover of `(scope, key)` is held uncommitted, then commits it. */
  async function duringTakeover<T>(scope: string, key: string, write: () => Promise<T>): Promise<T> {
    const updated = gate();
    const commit = gate();
    const p = db.provider === 'postgresql' ? (n: number) => `$${n}` : () => '?';
    const takeover = other.$transaction(async (tx) => {
      await tx.$executeRawUnsafe(
        `UPDATE idempotency_records SET owner_token = ${p(1)} WHERE scope = ${p(2)} AND idempotency_key = ${p(3)}`,
        NEW,
        scope,
        key,
      );
      updated.open();
      await commit.opened;
    });
    await updated.opened;
    const writing = write();
    await new Promise((resolve) => setTimeout(resolve, 300)); // the write is waiting on the row by now
    commit.open();
    await takeover;
    return writing;
  }

  const claim = async (scope: string) => {
    const store = prismaStore(prisma);
    await store.lease.claim({
      scope,
      key: 'k',
      operation: 'op',
      fingerprint: FINGERPRINT,
      ttlMs: 60_000,
      leaseMs: 60_000,
      ownerToken: OLD,
    });
    return store;
  };

  it('does not store a step once another request took the key over', async () => {
    const scope = uniqueScope();
    const store = await claim(scope);
    const saved = await duringTakeover(scope, 'k', () =>
      store.steps!.save({
        scope,
        key: 'k',
        ownerToken: OLD,
        name: 'charge',
        position: 0,
        fingerprint: FINGERPRINT,
        result: '{"json":"old owner"}',
        resultIsError: false,
      }),
    );
    expect(saved).toBe(false);
    expect(await store.steps!.list(scope, 'k')).toEqual([]);
  });

  it('does not clear the steps once another request took the key over', async () => {
    const scope = uniqueScope();
    const store = await claim(scope);
    await insertSteps(prisma, db.provider, scope, 'k', ['reserve']);
    await duringTakeover(scope, 'k', () => store.steps!.clear({ scope, key: 'k', ownerToken: OLD }));
    expect((await store.steps!.list(scope, 'k')).map((step) => step.name)).toEqual(['reserve']);
  });
}
