import { initTRPC, TRPCError } from '@trpc/server';
import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { Prisma } from '../../generated/sqlite/client.js';
import { idempotentDirectiveTypeDefs, useIdempotency } from '../../src/envelop/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { idempotency, idempotencyErrorData } from '../../src/trpc/index.js';
import { postGraphQL } from '../envelop/graphql-client.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

// A resolver that outlives the store's transaction timeout finds its transaction rolled back by
// Prisma when it writes through `tx` (P2028, "A query cannot be executed on an expired
// transaction"). Whichever integration runs it, the caller gets IDEMPOTENCY_TRANSACTION_EXPIRED
// (503, which the shipped clients retry), nothing is committed, and a retry with the same key
// runs the mutation once.

type Client = Awaited<ReturnType<typeof connect>>;
type Tx = Parameters<Parameters<Client['$transaction']>[0]>[0];

const TIMEOUT_MS = 300;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeEachDatabase('a resolver that outlives the transaction timeout', (db) => {
  let prisma: Client;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma?.$disconnect());

  /** Writes one order through `tx`, after outliving the timeout while `slow.now` is set. */
  function orderWriter() {
    const slow = { now: true, runs: 0 };
    const write = async (tx: Tx, userId: string) => {
      slow.runs++;
      if (slow.now) await sleep(TIMEOUT_MS + 300);
      const row = await tx.order.create({
        data: { userId, sku: 'sku-1', quantity: 1, total: new Prisma.Decimal(1) },
      });
      return { id: row.id };
    };
    return { slow, write };
  }

  const committed = async (userId: string) => ({
    orders: await prisma.order.count({ where: { userId } }),
    records: await prisma.idempotencyRecord.count({ where: { scope: userId } }),
  });

  it('answers IDEMPOTENCY_TRANSACTION_EXPIRED through tRPC, and the retry runs once', async () => {
    type Context = { userId: string; headers: Record<string, string> };
    const t = initTRPC.context<Context>().create();
    const { slow, write } = orderWriter();
    const store = prismaStore(prisma, { transaction: { timeout: TIMEOUT_MS } });
    const router = t.router({
      order: t.procedure
        .input(z.object({ sku: z.string() }))
        .use(idempotency({ store, scope: ({ ctx }) => ctx.userId }))
        .mutation(({ ctx }) => write((ctx as unknown as { tx: Tx }).tx, ctx.userId)),
    });
    const userId = uniqueScope();
    const caller = t.createCallerFactory(router)({ userId, headers: { 'idempotency-key': 'order-1' } });

    const error = await caller.order({ sku: 'sku-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TRPCError);
    expect((error as TRPCError).code).toBe('SERVICE_UNAVAILABLE');
    expect(idempotencyErrorData(error as TRPCError).idempotencyCode).toBe('IDEMPOTENCY_TRANSACTION_EXPIRED');
    expect(await committed(userId)).toEqual({ orders: 0, records: 0 });

    slow.now = false;
    const first = await caller.order({ sku: 'sku-1' });
    expect(await caller.order({ sku: 'sku-1' })).toEqual(first);
    expect(slow.runs).toBe(2);
    expect(await committed(userId)).toEqual({ orders: 1, records: 1 });
  });

  it.each([
    ['a field key', 'mutation { order(idempotencyKey: "order-1") { id } }', undefined],
    ['a header key', 'mutation { order { id } }', 'order-1'],
  ])(
    'answers IDEMPOTENCY_TRANSACTION_EXPIRED through GraphQL with %s, and the retry runs once',
    async (_with, query, idempotencyKey) => {
      const { slow, write } = orderWriter();
      type Context = { userId: string; tx?: Tx };
      const schema = createSchema<Context>({
        typeDefs: [
          idempotentDirectiveTypeDefs,
          /* GraphQL */ `
          type Order { id: Int! }
          type Query { ok: Boolean }
          type Mutation { order(idempotencyKey: String): Order! }
        `,
        ],
        resolvers: {
          Mutation: { order: (_: unknown, __: unknown, { tx, userId }: Context) => write(tx!, userId) },
        },
      });
      const yoga = createYoga({
        schema,
        logging: false,
        context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
        plugins: [
          useIdempotency({
            store: prismaStore(prisma, { transaction: { timeout: TIMEOUT_MS } }),
            scope: (context: Context) => context.userId,
          }),
        ],
      });
      const userId = uniqueScope();
      const send = () =>
        postGraphQL((url, init) => Promise.resolve(yoga.fetch(url, init)), 'http://yoga/graphql', {
          query,
          userId,
          idempotencyKey,
        });

      const failed = await send();
      const [error] = failed.body.errors ?? [];
      expect(failed.status).toBe(503);
      expect(error?.extensions).toMatchObject({ code: 'IDEMPOTENCY_TRANSACTION_EXPIRED' });
      expect(await committed(userId)).toEqual({ orders: 0, records: 0 });

      slow.now = false;
      const first = await send();
      expect(first.body.errors).toBeUndefined();
      expect((await send()).body.data).toEqual(first.body.data);
      expect(slow.runs).toBe(2);
      expect(await committed(userId)).toEqual({ orders: 1, records: 1 });
    },
  );
});
