import { afterAll, beforeAll, expect, it } from 'vitest';
import { runIdempotent } from '../../src/index.js';
import { type PrismaStoreOptions, prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const N = 8;

/**
 * Duplicates from separate processes (one client each) arrive together on a key whose record has
 * expired. Each claim locks the expired row, then takes it over: with a shared lock, that upgrade
 * deadlocked on PostgreSQL (7 of 8 calls failed with 40P01), which now locks it exclusively. On
 * MariaDB an exclusive lock deadlocked instead (INSERT IGNORE share-locks the row first), under load.
 */
describeEachDatabase('concurrent takeover of an expired record', (db) => {
  const clients: Awaited<ReturnType<typeof connect>>[] = [];
  beforeAll(async () => {
    // SQLite: one client (several on one file in one process only get SQLITE_BUSY), N stores on it.
    const count = db.provider === 'sqlite' ? 1 : N;
    for (let i = 0; i < count; i++) clients.push(await connect(db));
  });
  afterAll(() => Promise.all(clients.map((c) => c.$disconnect())));

  for (const isolationLevel of db.provider === 'sqlite' ? [undefined] : [undefined, 'RepeatableRead']) {
    it(`every duplicate gets the one result (${isolationLevel ?? 'default isolation'})`, async () => {
      const options: PrismaStoreOptions = isolationLevel ? { transaction: { isolationLevel } } : {};
      const stores = Array.from({ length: N }, (_, i) => prismaStore(clients[i % clients.length]!, options));
      for (let round = 0; round < 3; round++) {
        const scope = uniqueScope();
        let calls = 0;
        const run = (i: number, ttlMs = 60_000) =>
          runIdempotent(
            { store: stores[i]!, scope, key: 'k', operation: 'op', input: {}, ttlMs },
            async () => {
              calls++;
              await sleep(100);
              return `run-${calls}`;
            },
          );
        await run(0, 100);
        await sleep(200); // the record has expired
        calls = 0;
        const results = await Promise.allSettled(stores.map((_, i) => run(i)));
        const errors = results
          .filter((r): r is PromiseRejectedResult => r.status === 'rejected')
          .map((r) => String(r.reason).split('\n').pop());
        expect(errors, errors.join('\n')).toEqual([]);
        expect(calls).toBe(1);
      }
    }, 120_000);
  }
});
