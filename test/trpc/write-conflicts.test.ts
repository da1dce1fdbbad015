import { Decimal } from '@prisma/client/runtime/client';
import { createTRPCClient, httpLink } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { prismaStore } from '../../src/prisma/index.js';
import { idempotency } from '../../src/trpc/index.js';
import { connect, uniqueScope } from '../helpers/databases.js';
import { listen } from '../helpers/listen.js';
import { describeEachServer, type WriteConflicts, writeConflicts } from '../helpers/write-conflicts.js';

interface Context {
  userId: string;
  headers: Record<string, string | string[] | undefined>;
}

const t = initTRPC.context<Context>().create();
type Client = Awaited<ReturnType<typeof connect>>;

/**
 * `pay` writes a payment through `ctx.tx`, then a probe row that fails as a write conflict while
 * the marker's plan lasts; `draft` does the same with an optional key.
 */
function createRouter(prisma: Client, conflicts: WriteConflicts, runs: { count: number }) {
  const store = prismaStore(prisma);
  const scope = ({ ctx }: { ctx: Context }) => ctx.userId;
  const procedure = (required: boolean) =>
    t.procedure
      .input(z.object({ amount: z.string(), marker: z.string() }))
      .use(idempotency({ store, scope, required }))
      .mutation(async ({ ctx, input }) => {
        runs.count++;
        const payment = await ctx.tx.payment.create({
          data: { userId: ctx.userId, amount: new Decimal(input.amount), currency: 'EUR' },
        });
        await conflicts.probe(ctx.tx, input.marker);
        return { id: payment.id };
      });
  return t.router({ pay: procedure(true), draft: procedure(false) });
}

describeEachServer('idempotency() retries a write conflict of the resolver’s own ctx.tx query', (db) => {
  let prisma: Client;
  let conflicts: WriteConflicts;
  let router: ReturnType<typeof createRouter>;
  let url: string;
  let close: (() => Promise<void>) | undefined;
  const runs = { count: 0 };

  beforeAll(async () => {
    prisma = await connect(db);
    conflicts = await writeConflicts(prisma, db.provider);
    router = createRouter(prisma, conflicts, runs);
    ({ url, close } = await listen(
      createHTTPServer({
        router,
        createContext: ({ req }) => ({ userId: String(req.headers['x-user-id']), headers: req.headers }),
      }),
    ));
  });
  afterAll(async () => {
    await close?.();
    await prisma?.$disconnect();
  });

  const paymentsOf = (userId: string) => prisma.payment.count({ where: { userId } });

  type Input = { amount: string; marker: string };
  /** Calls `procedure` as `userId`, with the key in the `Idempotency-Key` header (or no key). */
  type Call = (procedure: 'pay' | 'draft', userId: string, input: Input, key?: string) => Promise<unknown>;
  const headersOf = (key?: string) => (key === undefined ? {} : { 'idempotency-key': key });
  const transports: [string, Call][] = [
    [
      'createCaller',
      (procedure, userId, input, key) =>
        t
          .createCallerFactory(router)({ userId, headers: headersOf(key) })
          [procedure](input),
    ],
    [
      'a real HTTP server and httpLink',
      (procedure, userId, input, key) =>
        createTRPCClient<typeof router>({
          links: [httpLink({ url, headers: { 'x-user-id': userId, ...headersOf(key) } })],
        })[procedure].mutate(input),
    ],
  ];

  describe.each(transports)('through %s', (_, call) => {
    it('runs the resolver again after two conflicts and answers once, with one payment', async () => {
      const userId = uniqueScope();
      const marker = await conflicts.plan(2);
      const before = runs.count;
      const first = await call('pay', userId, { amount: '4.00', marker }, 'conflicted');
      const retry = await call('pay', userId, { amount: '4.00', marker }, 'conflicted');

      expect(runs.count - before).toBe(3);
      expect(retry).toEqual(first);
      expect(await paymentsOf(userId)).toBe(1);
    });

    it('retries a keyless call of an optional key the same way', async () => {
      const userId = uniqueScope();
      const marker = await conflicts.plan(1);
      const before = runs.count;
      await call('draft', userId, { amount: '1.00', marker });

      expect(runs.count - before).toBe(2);
      expect(await paymentsOf(userId)).toBe(1);
    });
  });
});
