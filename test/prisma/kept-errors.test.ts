import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { runIdempotent, type Store, type TransactionSession } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A replayable error is kept in the call's own transaction (back at a savepoint after the claim)
 * where the store's statements skip the client (`directStatements`), else by a transaction of its
 * own after the rollback. Either way nothing the resolver wrote commits with it.
 */
for (const directStatements of [true, false]) {
  describeEachDatabase(`a replayable error, directStatements ${directStatements}`, (db) => {
    let prisma: Awaited<ReturnType<typeof connect>>;
    beforeAll(async () => {
      prisma = await connect(db, { directStatements });
    });
    afterAll(() => prisma?.$disconnect());

    const declined = () => Object.assign(new Error('card declined'), { code: 'CARD_DECLINED' });
    const options = (store: Store<unknown>, scope: string) => ({
      store,
      scope,
      key: 'k',
      operation: 'payments.create',
      input: {},
      replayErrors: (e: unknown) => (e as { code?: string }).code === 'CARD_DECLINED',
    });
    const pay = (tx: typeof prisma, scope: string) =>
      tx.payment.create({ data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' } });
    const paymentsOf = (scope: string) => prisma.payment.count({ where: { userId: scope } });

    it.each([
      ['a write on its way', 0, (tx: typeof prisma, scope: string) => pay(tx, scope)],
      [
        'a branch still writing, one write after another',
        1,
        async (tx: typeof prisma, scope: string) => {
          await pay(tx, scope);
          await pay(tx, scope);
        },
      ],
    ])('commits nothing of %s beside the failing check', async (_, checkMs, branch) => {
      const scope = uniqueScope();
      const store = prismaStore(prisma) as Store<unknown>;
      const running: Promise<unknown>[] = [];
      const error = await runIdempotent(options(store, scope), async (tx) => {
        const writing = branch(tx as typeof prisma, scope);
        running.push(writing.catch(() => undefined));
        const check =
          checkMs === 0
            ? Promise.reject(declined())
            : new Promise((_, reject) => setTimeout(() => reject(declined()), checkMs));
        await Promise.all([writing, check]);
      }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'CARD_DECLINED' });
      await Promise.all(running); // the branch has ended: whatever it wrote was refused or undone
      expect(await paymentsOf(scope)).toBe(0);
      expect(await store.find(scope, 'k')).toMatchObject({ status: 'COMPLETED', resultIsError: true });
    });

    it('keeps the error, and nothing of a branch still in a nested transaction', async () => {
      const scope = uniqueScope();
      const base = prismaStore(prisma) as Store<unknown>;
      let transactions = 0;
      const store: Store<unknown> = Object.assign(Object.create(base), {
        transaction: (work: (session: TransactionSession<unknown>) => Promise<unknown>) => {
          transactions++;
          return base.transaction!(work);
        },
      });
      const running: Promise<unknown>[] = [];
      const error = await runIdempotent(options(store, scope), async (tx) => {
        // Prisma runs a nested transaction on savepoints of its own, sent past the adapter's executeRaw.
        const nested = (tx as typeof prisma).$transaction(async (inner) => {
          await pause(50);
          await pay(inner as typeof prisma, scope);
        });
        running.push(nested.catch(() => undefined));
        await pause(10);
        throw declined();
      }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'CARD_DECLINED' });
      await Promise.all(running);
      expect(await paymentsOf(scope)).toBe(0);
      expect(await store.find(scope, 'k')).toMatchObject({ status: 'COMPLETED', resultIsError: true });
      // Prisma does not commit a transaction while a nested one is still open: kept by a transaction
      // of its own after the rollback, as without directStatements.
      expect(transactions).toBe(2);
    });

    it('keeps the error by a transaction of its own when its own transaction fails to', async () => {
      const base = prismaStore(prisma, { transaction: { timeout: 300 } }) as Store<unknown>;
      let transactions = 0;
      // The first transaction's completion comes after its timeout; the others' on time.
      const store: Store<unknown> = Object.assign(Object.create(base), {
        transaction: (work: (session: TransactionSession<unknown>) => Promise<unknown>) => {
          const late = ++transactions === 1;
          return base.transaction!((session) =>
            work({
              ...session,
              completesWithCommit: false,
              complete: async (completion) => {
                if (late) await new Promise((resolve) => setTimeout(resolve, 500));
                return session.complete(completion);
              },
            }),
          );
        },
      });
      const scope = uniqueScope();
      let calls = 0;
      const run = () =>
        runIdempotent(options(store, scope), async (tx) => {
          calls++;
          await pay(tx as typeof prisma, scope);
          if (calls === 1) throw declined();
          return 'charged';
        }).catch((e: unknown) => e);
      expect(await run()).toMatchObject({ code: 'CARD_DECLINED' });
      expect(await run()).toMatchObject({ code: 'CARD_DECLINED' });
      expect(calls).toBe(1);
      expect(await paymentsOf(scope)).toBe(0);
    });
  });
}
