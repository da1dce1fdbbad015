import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachServerDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A resolver's statements that go on after its transaction ended: a branch of a `Promise.all` queued
 * behind a statement that failed, or the rest of a query plan of Prisma's after Prisma rolled the
 * transaction back. Neither may commit on its own while the key answers as if nothing ran.
 */
describeEachServerDatabase('statements of the resolver’s after its transaction ended', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let other: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
    other = await connect(db);
  });
  afterAll(async () => {
    await prisma?.$disconnect();
    await other?.$disconnect();
  });
  const paymentsOf = (userId: string) => prisma.payment.count({ where: { userId } });
  const payment = (userId: string) => ({ data: { userId, amount: new Decimal(1), currency: 'EUR' } });

  // MariaDB ends the whole transaction at a deadlock and runs what follows on the session on its own.
  if (db.provider === 'mysql')
    it('never runs a call again whose other branch wrote behind the deadlock', async () => {
      const scope = uniqueScope();
      const [r1, r2] = [
        await prisma.payment.create(payment(`${scope}-r1`)),
        await prisma.payment.create(payment(`${scope}-r2`)),
      ];
      const holding = gate();
      const deadlocking = gate();
      // Another transaction, heavier than the call's (so the call is the deadlock's victim), holds R2.
      const helper = other
        .$transaction(
          async (tx) => {
            for (let i = 0; i < 40; i++)
              await tx.order.create({ data: { userId: `${scope}-h`, sku: `s${i}`, quantity: 1, total: 1 } });
            await tx.$executeRawUnsafe('UPDATE payments SET amount = amount + 1 WHERE id = ?', r2.id);
            holding.open();
            await deadlocking.opened;
            await pause(300);
            // The call waits for R2; asking for R1, which the call holds, is the deadlock.
            await tx.$executeRawUnsafe('UPDATE payments SET amount = amount + 1 WHERE id = ?', r1.id);
            throw new Error('rolled back');
          },
          { timeout: 20_000 },
        )
        .catch(() => undefined);
      await holding.opened;
      let attempts = 0;
      const outcome = await runIdempotent(
        { store: prismaStore(prisma), scope, key: 'k', operation: 'payments.create', input: {} },
        async (tx) => {
          const client = tx as typeof prisma;
          attempts++;
          await client.$executeRawUnsafe('UPDATE payments SET amount = amount + 1 WHERE id = ?', r1.id);
          if (attempts === 1) deadlocking.open();
          // Two branches: one waits for R2; the other's INSERT is written behind it on the connection.
          await Promise.all([
            client.$executeRawUnsafe('UPDATE payments SET amount = amount + 1 WHERE id = ?', r2.id),
            pause(50).then(() =>
              client.$executeRawUnsafe(
                "INSERT INTO payments (user_id, amount, currency) SELECT ?, 10 + SLEEP(0.2), 'EUR'",
                scope,
              ),
            ),
          ]);
          return 'paid';
        },
      ).catch((error: unknown) => error);
      await helper;
      await pause(300);
      // One payment and the answer, or none and IDEMPOTENCY_OUTCOME_UNKNOWN: never two.
      const paid = await paymentsOf(scope);
      expect(paid).toBeLessThanOrEqual(1);
      if (attempts > 1) expect(paid).toBe(1);
      expect(outcome).toMatchObject(
        attempts > 1 ? { value: 'paid' } : { code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' },
      );
    });

  it('commits nothing of a query plan that goes on after Prisma rolled the transaction back', async () => {
    const scope = uniqueScope();
    const store = prismaStore(prisma, { transaction: { timeout: 1_000 } });
    const holding = gate();
    const released = gate();
    // Another transaction holds the payments table: the upsert's first statement (its SELECT) waits.
    const helper = other
      .$transaction(
        async (tx) => {
          await tx.$executeRawUnsafe(
            db.provider === 'mysql'
              ? 'SELECT * FROM payments FOR UPDATE'
              : 'LOCK TABLE payments IN ACCESS EXCLUSIVE MODE',
          );
          holding.open();
          await released.opened;
        },
        { timeout: 20_000 },
      )
      .catch(() => undefined);
    await holding.opened;
    setTimeout(() => released.open(), 2_500);
    const outcome = await runIdempotent(
      { store, scope, key: 'k', operation: 'payments.upsert', input: {} },
      async (tx) => {
        // Not Prisma's native upsert (`id` is not in `create`): a SELECT, then an INSERT.
        const paid = await (tx as typeof prisma).payment.upsert({
          where: { id: -1 },
          create: { userId: scope, amount: new Decimal(10), currency: 'EUR' },
          update: { amount: new Decimal(11) },
        });
        return paid.id;
      },
    ).catch((error: unknown) => error);
    await helper;
    await pause(300);
    expect(outcome).toMatchObject({ code: 'IDEMPOTENCY_TRANSACTION_EXPIRED' });
    // The key was left free, with the promise that nothing was kept.
    expect(await store.find(scope, 'k')).toBeNull();
    expect(await paymentsOf(scope)).toBe(0);
  });
});
