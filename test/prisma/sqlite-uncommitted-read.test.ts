import { afterAll, beforeAll, expect, it } from 'vitest';
import { runIdempotent, type Store, type TransactionSession, withLocalCache } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, databases, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';

// Prisma's SQLite adapter has one connection: a read outside a transaction sees the writes of a
// transaction that has not committed. A duplicate in the same process whose read began before the
// first call took the key, and was answered between that call's result and its COMMIT, read a
// COMPLETED record that the failed COMMIT then undid.
let prisma: Awaited<ReturnType<typeof connect>>;
beforeAll(async () => {
  prisma = await connect(databases[0]!);
  await prisma.$executeRawUnsafe('CREATE TABLE IF NOT EXISTS uncommitted_parent (id INTEGER PRIMARY KEY)');
  await prisma.$executeRawUnsafe(
    'CREATE TABLE IF NOT EXISTS uncommitted_child (id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES uncommitted_parent(id) DEFERRABLE INITIALLY DEFERRED)',
  );
});
afterAll(async () => {
  await prisma?.$disconnect();
});

it.each([
  ['', false],
  [', nor keeps it in its localCache', true],
])(
  'never answers a duplicate from a record a call of this process had not committed while it read%s',
  async (_title, cache) => {
    const base = prismaStore(prisma);
    // Timing only: the duplicate's read reaches the database after the first call stored its result,
    // and the first call's COMMIT waits for that read's answer.
    const readMaySend = gate();
    const readAnswered = gate();
    const store: Store = {
      ...base,
      find: async (scope, key) => {
        await readMaySend.opened;
        return base.find(scope, key).finally(readAnswered.open);
      },
      transaction: (work) =>
        base.transaction!((session) =>
          work({
            tx: session.tx,
            claim: (request) => session.claim(request),
            takeOver: (request) => session.takeOver(request),
            complete: async (completion) => {
              const stored = await session.complete(completion);
              readMaySend.open();
              await readAnswered.opened;
              return stored;
            },
          } satisfies TransactionSession<unknown>),
        ),
    };
    const options = {
      store: cache ? withLocalCache(store, { max: 100 }) : store,
      scope: uniqueScope(),
      key: 'k-1',
      operation: 'pay',
      input: { amount: 1 },
    };
    let runs = 0;
    // A retry: it reads the record first, and its read is under way before the first call exists.
    const duplicate = runIdempotent(options, async () => ++runs);
    // The first attempt claims at once; its row's deferred foreign key fails the COMMIT.
    const first = runIdempotent({ ...options, firstAttempt: true }, async (tx) => {
      runs++;
      await (tx as typeof prisma).$executeRawUnsafe(
        `INSERT INTO uncommitted_child (id, parent_id) VALUES (${Date.now()}, -1)`,
      );
      return 'charged';
    });
    await expect(first).rejects.toThrow(/ForeignKeyConstraintViolation|FOREIGN KEY/i);
    // Nothing committed: the duplicate runs the call itself rather than replaying 'charged'.
    await expect(duplicate).resolves.toMatchObject({ replayed: false, value: 2 });
    expect(await base.find(options.scope, options.key)).toMatchObject({ status: 'COMPLETED' });
    // And every later call gets what committed.
    await expect(runIdempotent(options, async () => ++runs)).resolves.toMatchObject({
      replayed: true,
      value: 2,
    });
  },
);
