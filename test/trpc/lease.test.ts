import { Decimal } from '@prisma/client/runtime/client';
import { initTRPC, TRPCError } from '@trpc/server';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { prismaStore } from '../../src/prisma/index.js';
import { type IdempotencyMeta, idempotency } from '../../src/trpc/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';

interface Context {
  user: { id: string };
  headers: Record<string, string>;
  resHeaders: Headers;
}

const t = initTRPC.context<Context>().meta<IdempotencyMeta>().create();

/** A promise and the function that settles it, to hold a resolver at a chosen point. */

async function rejectionOf(promise: Promise<unknown>): Promise<TRPCError> {
  const error = await promise.then(
    () => expect.unreachable('the call succeeded'),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TRPCError);
  return error as TRPCError;
}

describeEachDatabase('idempotency() with .meta({ idempotency: { mode: lease } })', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  /** A connection of its own: it sees only what has committed. */
  let observer: Awaited<ReturnType<typeof connect>>;
  let router: ReturnType<typeof createRouter>;
  const runs = { charge: 0, draft: 0 };
  let held = gate();
  let failNext = false;

  function createRouter(client: typeof prisma) {
    // The store and the middleware are transactional: only the procedures' meta asks for a lease.
    // A transactional duplicate would wait up to a minute for the holder.
    const middleware = idempotency({
      store: prismaStore(client),
      scope: ({ ctx }: { ctx: Context }) => ctx.user.id,
      waitTimeoutMs: 60_000,
    });
    const input = z.object({ amount: z.string() });
    return t.router({
      charge: t.procedure
        .meta({ idempotency: { mode: 'lease', leaseMs: 5_000 } })
        .input(input)
        .use(middleware)
        .mutation(async ({ ctx, input }) => {
          runs.charge++;
          const payment = await ctx.tx.payment.create({
            data: { userId: ctx.user.id, amount: new Decimal(input.amount), currency: 'EUR' },
          });
          if (failNext) throw new TRPCError({ code: 'BAD_GATEWAY', message: 'gateway down' });
          await held.opened;
          return payment;
        }),
      draft: t.procedure
        .meta({ idempotency: { mode: 'lease', required: false } })
        .input(input)
        .use(middleware)
        .mutation(async ({ ctx, input }) => {
          runs.draft++;
          await ctx.tx.payment.create({
            data: { userId: ctx.user.id, amount: new Decimal(input.amount), currency: 'EUR' },
          });
          throw new TRPCError({ code: 'BAD_GATEWAY', message: `gateway down (${String(ctx.idempotency)})` });
        }),
    });
  }

  beforeAll(async () => {
    prisma = await connect(db);
    observer = await connect(db);
    router = createRouter(prisma);
  });
  afterAll(async () => {
    await observer?.$disconnect();
    await prisma?.$disconnect();
  });

  const callerOf = (user: string, key?: string) => {
    const resHeaders = new Headers();
    const headers: Record<string, string> = key === undefined ? {} : { 'idempotency-key': key };
    const caller = t.createCallerFactory(router)({ user: { id: user }, headers, resHeaders });
    return { caller, resHeaders };
  };
  const paymentsOf = (user: string) => observer.payment.count({ where: { userId: user } });
  const recordOf = (user: string, key: string) =>
    observer.idempotencyRecord.findUnique({ where: { scope_key: { scope: user, key } } });

  it('makes a duplicate during the lease wait for the running call, runs once and replays to both', async () => {
    const user = uniqueScope();
    held = gate();
    const before = runs.charge;
    const first = callerOf(user, 'charge-1').caller.charge({ amount: '9.99' });

    // The resolver is still held, yet its write has committed: ctx.tx is no transaction.
    await expect.poll(() => paymentsOf(user), { timeout: 10_000 }).toBe(1);
    const record = await recordOf(user, 'charge-1');
    expect(record).toMatchObject({ status: 'IN_PROGRESS', ownerToken: expect.any(String) });
    // The meta's leaseMs, not the default 30 s.
    const leaseMs = record!.lockedUntil!.getTime() - record!.createdAt.getTime();
    expect(leaseMs).toBeGreaterThan(4_000);
    expect(leaseMs).toBeLessThanOrEqual(5_000);

    const duplicate = callerOf(user, 'charge-1');
    const waiting = duplicate.caller.charge({ amount: '9.99' });
    await new Promise((resolve) => setTimeout(resolve, 50));
    held.open();
    const payment = await first;
    expect(await waiting).toEqual(payment);
    expect(duplicate.resHeaders.get('idempotent-replayed')).toBe('true');
    const retry = callerOf(user, 'charge-1');
    expect(await retry.caller.charge({ amount: '9.99' })).toEqual(payment);
    expect(retry.resHeaders.get('idempotent-replayed')).toBe('true');
    expect(runs.charge - before).toBe(1);
    expect(await paymentsOf(user)).toBe(1);
    expect(await recordOf(user, 'charge-1')).toMatchObject({ status: 'COMPLETED', lockedUntil: null });
  });

  it('keeps the write of a resolver that throws in lease mode, releases the key, and the retry runs', async () => {
    const user = uniqueScope();
    held = gate();
    held.open();
    const before = runs.charge;
    failNext = true;
    const error = await rejectionOf(callerOf(user, 'charge-2').caller.charge({ amount: '1.00' }));
    failNext = false;
    expect([error.code, error.message]).toEqual(['BAD_GATEWAY', 'gateway down']);
    expect(await paymentsOf(user)).toBe(1); // not rolled back: it committed on its own
    expect(await recordOf(user, 'charge-2')).toBeNull();

    await callerOf(user, 'charge-2').caller.charge({ amount: '1.00' });
    expect(runs.charge - before).toBe(2);
    expect(await paymentsOf(user)).toBe(2);
  });

  it('runs a keyless call of an optional key unrecorded, with the plain client as ctx.tx', async () => {
    const user = uniqueScope();
    const before = runs.draft;
    const error = await rejectionOf(callerOf(user).caller.draft({ amount: '2.00' }));
    expect(error.message).toBe('gateway down (null)'); // ctx.idempotency is null
    expect(runs.draft - before).toBe(1);
    expect(await paymentsOf(user)).toBe(1); // a transaction would have rolled it back
    expect(await observer.idempotencyRecord.count({ where: { scope: user } })).toBe(0);
  });
});
