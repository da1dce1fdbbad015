import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { IdempotencyKeyInProgressError, runIdempotent, type Store } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

describeEachDatabase('concurrent duplicates', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  type Tx = Parameters<Parameters<typeof prisma.$transaction>[0]>[0];

  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma?.$disconnect());

  /** A store that counts the transactions it opens. */
  function countingStore(): { store: Store<Tx>; transactions: () => number } {
    const inner = prismaStore(prisma);
    let transactions = 0;
    const store: Store<Tx> = {
      ...inner,
      transaction(work) {
        transactions++;
        return inner.transaction!(work);
      },
    };
    return { store, transactions: () => transactions };
  }

  /** One payment per run, through `store`; `calls` counts resolver runs. */
  function payment(scope: string, options: { waitTimeoutMs?: number } = {}) {
    const calls = { count: 0 };
    let started!: () => void;
    /** Settles when a resolver first runs, i.e. once some call holds the key. */
    const running = new Promise<void>((resolve) => (started = resolve));
    let gate: Promise<void> | undefined;
    let failNext = false;
    const run = (store: Store<Tx>) =>
      runIdempotent(
        { store, scope, key: 'k', operation: 'payments.create', input: { amount: '5.00' }, ...options },
        async (tx) => {
          calls.count++;
          started();
          const row = await tx.payment.create({
            data: { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' },
          });
          await gate;
          if (failNext) {
            failNext = false;
            throw new Error('declined by the bank');
          }
          return { id: row.id };
        },
      );
    return {
      run,
      calls,
      running,
      hold: (until: Promise<void>) => (gate = until),
      failFirst: () => (failNext = true),
    };
  }

  const paymentsOf = (scope: string) => prisma.payment.count({ where: { userId: scope } });

  it('duplicates in one process wait for the call holding the key without opening transactions, then replay', async () => {
    const scope = uniqueScope();
    const { store, transactions } = countingStore();
    const { run, calls } = payment(scope);
    const results = await Promise.all(Array.from({ length: 16 }, () => run(store)));
    expect(calls.count).toBe(1);
    expect(await paymentsOf(scope)).toBe(1);
    expect(transactions()).toBe(1);
    expect(new Set(results.map((r) => r.value.id)).size).toBe(1);
    expect(results.filter((r) => r.replayed)).toHaveLength(15);
  });

  it('duplicates through separate stores, as from separate processes, still run once: the row lock decides', async () => {
    const scope = uniqueScope();
    const stores = Array.from({ length: 8 }, () => prismaStore(prisma));
    const { run, calls } = payment(scope);
    const results = await Promise.all(Array.from({ length: 24 }, (_, i) => run(stores[i % stores.length]!)));
    expect(calls.count).toBe(1);
    expect(await paymentsOf(scope)).toBe(1);
    expect(new Set(results.map((r) => r.value.id)).size).toBe(1);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
  });

  it('when the call holding the key rolls back, one waiting duplicate claims it and runs once', async () => {
    const scope = uniqueScope();
    const { store } = countingStore();
    const { run, calls, running, hold, failFirst } = payment(scope);
    let release!: () => void;
    hold(new Promise<void>((resolve) => (release = resolve)));
    failFirst();
    const first = run(store).catch((error: unknown) => error);
    await running; // `first` holds the key before any duplicate starts
    const duplicates = Array.from({ length: 5 }, () => run(store));
    await new Promise((resolve) => setTimeout(resolve, 50));
    release();
    expect(await first).toMatchObject({ message: 'declined by the bank' });
    const results = await Promise.all(duplicates);
    expect(calls.count).toBe(2);
    expect(await paymentsOf(scope)).toBe(1);
    expect(new Set(results.map((r) => r.value.id)).size).toBe(1);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
  });

  it('a duplicate still waiting after waitTimeoutMs gets IN_PROGRESS without opening a transaction', async () => {
    const scope = uniqueScope();
    const { store, transactions } = countingStore();
    const { run, calls, running, hold } = payment(scope, { waitTimeoutMs: 100 });
    let release!: () => void;
    hold(new Promise<void>((resolve) => (release = resolve)));
    const first = run(store);
    await running;
    await expect(run(store)).rejects.toBeInstanceOf(IdempotencyKeyInProgressError);
    expect(transactions()).toBe(1);
    release();
    await expect(first).resolves.toMatchObject({ replayed: false });
    await expect(run(store)).resolves.toMatchObject({ replayed: true });
    expect(calls.count).toBe(1);
  });

  it.each(['the same store', 'another store on the same client'])(
    'a duplicate through %s never replays a result stored by a transaction that then rolls back',
    async (through) => {
      // Through Prisma's SQLite adapter (one connection) a read outside the transaction sees the
      // stored result before COMMIT; the duplicate must wait for the outcome instead.
      const scope = uniqueScope();
      const inner = prismaStore(prisma);
      let stored!: () => void;
      const resultStored = new Promise<void>((resolve) => (stored = resolve));
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let failAfterStoring = true;
      const store: Store<Tx> = {
        ...inner,
        transaction: (work) =>
          inner.transaction!((session) =>
            work({
              ...session,
              // A completion that fails on its own, which the store cannot see: awaited before the commit.
              completesWithCommit: false,
              async complete(completion) {
                const completed = await session.complete(completion);
                if (!failAfterStoring) return completed;
                failAfterStoring = false;
                stored();
                await gate;
                throw new Error('the commit failed');
              },
            }),
          ),
      };
      const { run, calls } = payment(scope);
      const first = run(store).catch((error: unknown) => error);
      await resultStored;
      const duplicate = run(through === 'the same store' ? store : prismaStore(prisma));
      await new Promise((resolve) => setTimeout(resolve, 50));
      release();
      expect(await first).toMatchObject({ message: 'the commit failed' });
      const result = await duplicate;
      expect(result.replayed).toBe(false);
      expect(calls.count).toBe(2);
      expect(await paymentsOf(scope)).toBe(1);
    },
  );
});
