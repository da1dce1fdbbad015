import { createTRPCClient, httpLink, TRPCClientError } from '@trpc/client';
import { TRPCError } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotencyHeaders, idempotencyLink } from '../../src/client/index.js';
import { connect, databases, uniqueScope } from '../helpers/databases.js';
import { listen } from '../helpers/listen.js';
import { type AppRouter, type Context, createRouter } from './samples/base-procedure.js';

type Prisma = Awaited<ReturnType<typeof connect>>;
const sqlite = databases.find((db) => db.provider === 'sqlite')!;

async function rejectionOf(promise: Promise<unknown>): Promise<TRPCError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TRPCError);
  return error as TRPCError;
}

describe('an idempotent base procedure, extended per route with .input()', () => {
  let prisma: Prisma;
  beforeAll(async () => {
    prisma = await connect(sqlite);
  });
  afterAll(() => prisma?.$disconnect());

  const callerFor = (user: string | null, headers: Record<string, string> = {}) =>
    createRouter(prisma).createCaller({ user: user ? { id: user } : null, headers } as Context);
  const paymentsOf = (user: string) => prisma.payment.findMany({ where: { userId: user } });

  it('runs each route once per key and replays it, over the input as sent', async () => {
    const user = uniqueScope();
    const caller = callerFor(user, { 'idempotency-key': 'k-1' });
    const first = await caller.createPayment({ amount: '12.50', currency: 'EUR' });
    const second = await caller.createPayment({ amount: '12.50', currency: 'EUR' });
    expect(second).toEqual(first);
    expect(await paymentsOf(user)).toHaveLength(1);
  });

  it('rejects the same key with another input as IDEMPOTENCY_KEY_MISMATCH', async () => {
    const user = uniqueScope();
    const caller = callerFor(user, { 'idempotency-key': 'k-1' });
    await caller.createPayment({ amount: '12.50', currency: 'EUR' });
    const error = await rejectionOf(caller.createPayment({ amount: '99.00', currency: 'EUR' }));
    expect([error.code, (error.cause as { code?: string }).code]).toEqual([
      'UNPROCESSABLE_CONTENT',
      'IDEMPOTENCY_KEY_MISMATCH',
    ]);
    expect(await paymentsOf(user)).toHaveLength(1);
  });

  it("validates each route's input after the claim, storing nothing for a call it refuses", async () => {
    const user = uniqueScope();
    const caller = callerFor(user, { 'idempotency-key': 'k-1' });
    const refused = await rejectionOf(caller.createPayment({ amount: '12.50', currency: 'EURO' }));
    expect(refused.code).toBe('BAD_REQUEST');
    expect(await prisma.idempotencyRecord.count({ where: { scope: user } })).toBe(0);
    // The key was not spent: the corrected call runs under it.
    await caller.createPayment({ amount: '12.50', currency: 'EUR' });
    expect(await paymentsOf(user)).toHaveLength(1);
  });

  it('keys a route without .input() by its input field as well as by the header', async () => {
    const user = uniqueScope();
    const caller = callerFor(user);
    const pay = caller.payMonthlyFee as unknown as (input: { idempotencyKey: string }) => Promise<unknown>;
    const first = await pay({ idempotencyKey: 'fee-2026-01' });
    expect(await pay({ idempotencyKey: 'fee-2026-01' })).toEqual(first);
    await callerFor(user, { 'idempotency-key': 'fee-2026-02' }).payMonthlyFee();
    await callerFor(user, { 'idempotency-key': 'fee-2026-02' }).payMonthlyFee();
    expect(await paymentsOf(user)).toHaveLength(2);
  });

  it('runs the auth middleware first: an anonymous call is UNAUTHORIZED and claims nothing', async () => {
    const error = await rejectionOf(
      callerFor(null, { 'idempotency-key': 'k-anon' }).createPayment({ amount: '1', currency: 'EUR' }),
    );
    expect(error.code).toBe('UNAUTHORIZED');
  });

  describe('over HTTP with @trpc/client', () => {
    let url: string;
    let close: () => Promise<void> = async () => undefined;
    beforeAll(async () => {
      const server = createHTTPServer({
        router: createRouter(prisma),
        createContext: ({ req, res, info }) => ({
          req,
          res,
          info,
          user: req.headers.authorization ? { id: req.headers.authorization } : null,
        }),
      });
      ({ url, close } = await listen(server));
    });
    afterAll(() => close());

    const clientFor = (user: string) =>
      createTRPCClient<AppRouter>({
        links: [
          idempotencyLink({ sendKeyIn: 'header' }),
          httpLink({ url, headers: ({ op }) => ({ ...idempotencyHeaders({ op }), authorization: user }) }),
        ],
      });

    it('runs a keyed mutation once and replays it, and refuses other input under its key', async () => {
      const user = uniqueScope();
      const trpc = clientFor(user);
      const context = { idempotencyKey: 'http-1' };
      const first = await trpc.createPayment.mutate({ amount: '3.00', currency: 'EUR' }, { context });
      const again = await trpc.createPayment.mutate({ amount: '3.00', currency: 'EUR' }, { context });
      expect(again).toEqual(first);
      const error = await trpc.createPayment
        .mutate({ amount: '4.00', currency: 'EUR' }, { context })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TRPCClientError);
      expect((error as TRPCClientError<AppRouter>).data?.httpStatus).toBe(422);
      expect(await paymentsOf(user)).toHaveLength(1);
    });

    it('keys a route without .input() by the header', async () => {
      const user = uniqueScope();
      const trpc = clientFor(user);
      const context = { idempotencyKey: 'http-fee' };
      const first = await trpc.payMonthlyFee.mutate(undefined, { context });
      expect(await trpc.payMonthlyFee.mutate(undefined, { context })).toEqual(first);
      expect(await paymentsOf(user)).toHaveLength(1);
    });
  });
});
