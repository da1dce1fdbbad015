import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { isIdempotencyError, runIdempotent } from '../../src/index.js';
import { CommitRefusedError } from '../../src/prisma/direct-statements.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

/**
 * A resolver that sends `COMMIT` through its `tx` (a helper that "makes the payment durable" before
 * it calls a gateway). Through the driver adapter (`directStatements`, `adapterForUrl`'s default) it
 * would commit the claim and the payment, the store's result after it refused on a transaction that
 * had ended: a retryable answer with the payment made, and a retry that took the key over and paid
 * again. The `COMMIT` is refused instead, before it is sent.
 */
describeEachDatabase('a COMMIT the resolver sends itself', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(async () => {
    await prisma?.$disconnect();
  });

  // Every spelling of a commit the database takes, not only Prisma's own `COMMIT`.
  const spellings = {
    sqlite: ['END', 'END TRANSACTION', 'commit transaction', '/* durable */ COMMIT;'],
    postgresql: ['END', 'end work', 'COMMIT TRANSACTION', 'COMMIT AND NO CHAIN', '-- durable\nCOMMIT'],
    mysql: ['commit work', 'COMMIT AND NO CHAIN', 'COMMIT WORK NO RELEASE', '/* durable */ COMMIT'],
  }[db.provider];
  const cases: [string, boolean, string][] = [
    ['then returns', false, 'COMMIT'],
    ['then writes again', true, 'COMMIT'],
    ...spellings.map((sql): [string, boolean, string] => [`as ${JSON.stringify(sql)}`, false, sql]),
  ];
  it.each(cases)(
    'is refused, nothing commits, and the retry pays once (%s)',
    async (_, writesAfter, commit) => {
      const scope = uniqueScope();
      const store = prismaStore(prisma);
      let runs = 0;
      let commitFailure: unknown;
      const pay = () =>
        runIdempotent({ store, scope, key: 'k', operation: 'payments.create', input: {} }, async (tx) => {
          runs++;
          const t = tx as unknown as typeof prisma;
          await t.payment.create({ data: { userId: scope, amount: new Decimal(1), currency: 'EUR' } });
          if (runs === 1) {
            await t.$executeRawUnsafe(commit).catch((error: unknown) => {
              commitFailure = error;
            });
            if (writesAfter)
              await t.order.create({ data: { userId: scope, sku: 's', quantity: 1, total: new Decimal(1) } });
            if (commitFailure) throw commitFailure;
          }
          return `run ${runs}`;
        });
      const first = await pay().catch((error: unknown) => error);
      // The resolver's own failure, not an answer of ours that a client retries.
      expect(isIdempotencyError(first)).toBe(false);
      expect(String(commitFailure)).toContain(new CommitRefusedError().message);
      expect(await prisma.payment.count({ where: { userId: scope } })).toBe(0);
      expect(await prisma.order.count({ where: { userId: scope } })).toBe(0);
      expect(await store.find(scope, 'k')).toBeNull();

      await expect(pay()).resolves.toMatchObject({ value: 'run 2', replayed: false });
      await expect(pay()).resolves.toMatchObject({ value: 'run 2', replayed: true });
      expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
    },
  );
});
