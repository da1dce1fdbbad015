import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, uniqueScope } from '../helpers/databases.js';
import { describeEachServer, type WriteConflicts, writeConflicts } from '../helpers/write-conflicts.js';

describeEachServer('a write conflict under a replayErrors that accepts every error', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let conflicts: WriteConflicts;
  beforeAll(async () => {
    prisma = await connect(db);
    conflicts = await writeConflicts(prisma, db.provider);
  });
  afterAll(() => prisma?.$disconnect());

  it('is retried by the store, not kept as the key’s answer', async () => {
    const store = prismaStore(prisma);
    const scope = uniqueScope();
    const marker = await conflicts.plan(2);
    let runs = 0;
    const outcome = await runIdempotent(
      { store, scope, key: 'k', operation: 'payments.create', input: {}, replayErrors: () => true },
      async (tx) => {
        runs++;
        const payment = await tx.payment.create({
          data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' },
        });
        await conflicts.probe(tx, marker);
        return payment.id;
      },
    );
    expect(outcome.replayed).toBe(false);
    expect(runs).toBe(3);
    expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
    expect(await store.find(scope, 'k')).toMatchObject({ status: 'COMPLETED', resultIsError: false });
  });
});
