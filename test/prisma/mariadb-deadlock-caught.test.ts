import { Decimal } from '@prisma/client/runtime/client';
import { initTRPC } from '@trpc/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import type { PrismaClient as SqliteClient } from '../../generated/sqlite/client.js';
import { type ResolverClaim, runIdempotent, type Step } from '../../src/index.js';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import { prismaStore } from '../../src/prisma/index.js';
import { idempotency } from '../../src/trpc/index.js';
import { gate } from '../helpers/gate.js';

// A real InnoDB deadlock in the resolver's own statement: MariaDB rolls back the whole transaction
// (the claim too) and the session goes on outside it. The resolver catches the error and returns.
// Its completion (INSERT … SELECT … ON DUPLICATE KEY UPDATE) must not then commit on its own over
// the row there now: a duplicate's completed record, or the expired one the claim took over.

const URL = process.env.TEST_MYSQL_URL;
type Client = SqliteClient;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Context {
  userId: string;
  headers: Record<string, string | undefined>;
}
const t = initTRPC.context<Context>().create();

/** A call's outcome, either way. */
const settled = <T>(call: Promise<T>) =>
  call.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );

/**
 * A deadlock whose victim is a resolver: `victim(tx)` locks row 1 and, once `strike()` is called,
 * asks for row 2, which a heavier transaction on `x` holds while it asks for row 1. InnoDB rolls
 * back the lighter one, the resolver's, which catches the error (`caught()`) and goes on.
 */
function deadlock(x: Client) {
  const ready = gate();
  const goOn = gate();
  const holds = gate();
  const go = gate();
  let caught: unknown;
  const heavy = x.$transaction(
    async (tx) => {
      for (let i = 0; i < 20; i++) {
        await tx.$executeRawUnsafe(
          `INSERT INTO deadlock_heavy (v) VALUES ${Array.from({ length: 50 }, () => '(1)').join(',')}`,
        );
      }
      await tx.$executeRawUnsafe('UPDATE deadlock_locks SET v = v + 1 WHERE id = 2');
      holds.open();
      await go.opened;
      await tx.$executeRawUnsafe('UPDATE deadlock_locks SET v = v + 1 WHERE id = 1');
    },
    { timeout: 30_000, maxWait: 10_000 },
  );
  return {
    /** Row 2 is held. */
    held: holds.opened,
    /** The victim holds row 1. */
    ready: ready.opened,
    caught: () => caught,
    async victim(tx: Client) {
      await tx.$executeRawUnsafe('UPDATE deadlock_locks SET v = v + 1 WHERE id = 1');
      ready.open();
      await goOn.opened;
      try {
        await tx.$executeRawUnsafe('UPDATE deadlock_locks SET v = v + 1 WHERE id = 2');
      } catch (error) {
        // e.g. "best effort" bookkeeping: log and go on
        caught = error;
      }
    },
    /** The victim waits for row 2, then the heavy transaction asks for row 1. */
    async strike() {
      goOn.open();
      await sleep(300);
      go.open();
      await heavy;
    },
  };
}

// A deadlock needs a lock wait that InnoDB resolves by rolling back one transaction: the gates
// order the three transactions, and the short sleeps let each lock wait begin.
(URL ? describe : describe.skip)('MariaDB: a deadlock the resolver catches and goes on from', () => {
  let a: Client;
  let b: Client;
  let x: Client;
  beforeAll(async () => {
    const make = async () =>
      new MysqlClient({ adapter: (await adapterForUrl(URL!)) as never }) as unknown as Client;
    a = await make();
    b = await make();
    x = await make();
    await x.$executeRawUnsafe(
      'CREATE TABLE IF NOT EXISTS deadlock_locks (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB',
    );
    await x.$executeRawUnsafe(
      'CREATE TABLE IF NOT EXISTS deadlock_heavy (id INT AUTO_INCREMENT PRIMARY KEY, v INT) ENGINE=InnoDB',
    );
    await x.$executeRawUnsafe('INSERT IGNORE INTO deadlock_locks (id, v) VALUES (1, 0), (2, 0)');
  });
  afterAll(async () => {
    await Promise.all([a?.$disconnect(), b?.$disconnect(), x?.$disconnect()]);
  });

  it('the first call does not answer a result that was rolled back, nor overwrite the duplicate’s stored result', async () => {
    const userId = `u-${Math.random().toString(36).slice(2)}`;
    const key = 'pay-deadlock-1';
    const lock = deadlock(x);

    const routerOf = (prisma: Client, who: 'A' | 'B') =>
      t.router({
        pay: t.procedure
          .input(z.object({ amount: z.string() }))
          .use(
            idempotency({
              store: prismaStore(prisma),
              scope: ({ ctx }) => ctx.userId,
              waitTimeoutMs: 20_000,
            }),
          )
          .mutation(async ({ ctx, input }) => {
            const payment = await ctx.tx.payment.create({
              data: { userId: ctx.userId, amount: new Decimal(input.amount), currency: who },
            });
            if (who === 'A') await lock.victim(ctx.tx as unknown as Client);
            else await sleep(300);
            return { paymentId: payment.id, by: who };
          }),
      });
    const callA = t.createCallerFactory(routerOf(a, 'A'))({ userId, headers: { 'idempotency-key': key } });
    const callB = t.createCallerFactory(routerOf(b, 'B'))({ userId, headers: { 'idempotency-key': key } });

    await lock.held;
    const first = settled(callA.pay({ amount: '5.00' }));
    await lock.ready;
    // The duplicate from another server: blocks on A's claim row.
    const second = settled(callB.pay({ amount: '5.00' }));
    await sleep(300);
    await lock.strike(); // A is the victim

    const [ra, rb] = await Promise.all([first, second]);
    const payments = await x.payment.findMany({ where: { userId } });
    // A retry with the key replays the stored record
    const retry = await callA.pay({ amount: '5.00' });

    expect(String((lock.caught() as Error)?.message)).toMatch(/Deadlock/i);
    expect(payments).toHaveLength(1); // A's payment rolled back with the deadlock
    expect(rb).toMatchObject({ ok: true, value: { by: 'B' } });
    // Every successful answer must be the stored one, and name a payment that exists.
    if (ra.ok) {
      expect(payments.map((p) => p.id)).toContain(ra.value.paymentId);
    }
    expect(retry).toEqual(rb.ok ? rb.value : undefined);
  });

  it('key reused after its record expired (takeover), deadlock caught: no duplicate needed', async () => {
    const userId = `u-${Math.random().toString(36).slice(2)}`;
    const key = 'pay-expired-1';
    let lock: ReturnType<typeof deadlock> | undefined;
    const router = t.router({
      pay: t.procedure
        .input(z.object({ amount: z.string() }))
        .use(idempotency({ store: prismaStore(a), scope: ({ ctx }) => ctx.userId }))
        .mutation(async ({ ctx, input }) => {
          const payment = await ctx.tx.payment.create({
            data: { userId: ctx.userId, amount: new Decimal(input.amount), currency: 'EUR' },
          });
          await lock?.victim(ctx.tx as unknown as Client);
          return { paymentId: payment.id, amount: input.amount };
        }),
    });
    const caller = t.createCallerFactory(router)({ userId, headers: { 'idempotency-key': key } });
    await caller.pay({ amount: '1.00' });
    // The record expires (24 h later, say); the client reuses the key for a new payment.
    await x.$executeRawUnsafe(
      'UPDATE idempotency_records SET expires_at = UTC_TIMESTAMP(3) - INTERVAL 1 HOUR WHERE scope = ?',
      userId,
    );
    const struck = deadlock(x);
    lock = struck;
    await struck.held;
    const fresh = settled(caller.pay({ amount: '5.00' }));
    await struck.ready;
    await struck.strike();
    const r = await fresh;
    lock = undefined;
    const payments = await x.payment.findMany({ where: { userId } });
    const retry = await settled(caller.pay({ amount: '5.00' }));
    expect(String((struck.caught() as Error)?.message)).toMatch(/Deadlock/i);
    // The resolver sent nothing after the deadlock, and the deadlock rolled everything back: the
    // transaction runs again (not IDEMPOTENCY_OUTCOME_UNKNOWN, which the store's own question about
    // the session once made it), and its payment is the one kept.
    expect(r).toMatchObject({ ok: true });
    if (r.ok) expect(payments.map((p) => p.id)).toContain(r.value.paymentId);
    expect(payments).toHaveLength(2); // the first call's, and the run again's
    expect(retry).toEqual(r.ok ? { ok: true, value: r.value } : expect.anything());
  });

  /**
   * A lease-mode call whose one transactional step runs `fn` with its `tx`, the deadlock struck while
   * it runs: what the call answered, and the deadlock. `victim(tx)` makes the step's transaction its
   * victim (again on a run again, which the deadlock, over by then, lets through).
   */
  async function stepStruck(
    store: ReturnType<typeof prismaStore>,
    userId: string,
    fn: (tx: Client, victim: (tx: Client) => Promise<void>) => Promise<number>,
  ) {
    const struck = deadlock(x);
    let lock: typeof struck | undefined = struck;
    const victim = async (tx: Client) => lock?.victim(tx);
    await struck.held;
    const first = settled(
      runIdempotent(
        { store, scope: userId, key: 'k', operation: 'pay', input: { amount: '5.00' }, mode: 'lease' },
        (_tx, claim: ResolverClaim<unknown>) =>
          (claim.step as Step<Client>)('pay', async ({ tx }) => fn(tx, victim), { transactional: true }),
      ),
    );
    await struck.ready;
    await struck.strike();
    const answered = await first;
    lock = undefined;
    return { answered, struck };
  }

  it('a transactional step whose fn catches the deadlock and writes nothing after it: its record is not stored without its writes, and it runs again', async () => {
    const userId = `u-${Math.random().toString(36).slice(2)}`;
    const store = prismaStore(a);
    const { answered, struck } = await stepStruck(store, userId, async (tx, victim) => {
      const payment = await tx.payment.create({
        data: { userId, amount: new Decimal('5.00'), currency: 'EUR' },
      });
      await victim(tx);
      return payment.id;
    });
    expect(String((struck.caught() as Error)?.message)).toMatch(/Deadlock/i);
    // The step's payment rolled back with the deadlock, and its record did not commit on its own
    // (the save writes only inside the transaction). The fn sent nothing after the deadlock, so
    // nothing committed: a write conflict, and the step's transaction ran again, its payment and
    // its record committing together once.
    const payments = await x.payment.findMany({ where: { userId } });
    expect(payments).toHaveLength(1);
    expect(answered).toMatchObject({ ok: true, value: { value: payments[0]!.id, replayed: false } });
    expect((await store.steps!.list(userId, 'k')).map((step) => step.name)).toEqual(['pay']);
  });

  it('a transactional step whose fn writes after catching the deadlock: IDEMPOTENCY_OUTCOME_UNKNOWN, not run again', async () => {
    const userId = `u-${Math.random().toString(36).slice(2)}`;
    const store = prismaStore(a);
    let runs = 0;
    const { answered, struck } = await stepStruck(store, userId, async (tx, victim) => {
      runs++;
      await victim(tx);
      // Written after the deadlock: outside any transaction, it commits on its own.
      const payment = await tx.payment.create({
        data: { userId, amount: new Decimal('5.00'), currency: 'EUR' },
      });
      return payment.id;
    });
    expect(String((struck.caught() as Error)?.message)).toMatch(/Deadlock/i);
    expect(await store.steps!.list(userId, 'k')).toEqual([]);
    expect(answered).toMatchObject({ ok: false, error: { code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' } });
    expect(runs).toBe(1);
  });
});
