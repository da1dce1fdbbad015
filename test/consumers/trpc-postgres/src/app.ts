import { PrismaPg } from '@prisma/adapter-pg';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import {
  directStatements,
  idempotencyStatementNames,
  lazyBegin,
  prismaStore,
} from 'idempotent-mutations/prisma';
import { idempotency, idempotencyErrorFormatter } from 'idempotent-mutations/trpc';
import pg from 'pg';
import { z } from 'zod';
import { PrismaClient } from '../generated/prisma/client.js';

// A pipelining pool (pg 8.23+) whose BEGIN shares a round trip with the transaction's first statement.
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  connectionTimeoutMillis: 5_000,
  pipeline: true,
  Client: lazyBegin(pg.Client),
});
// The store's own statements are prepared once per connection (not yours: they stay unnamed), and
// in a transaction they skip Prisma's client runtime (directStatements).
const adapter = directStatements(new PrismaPg(pool, { statementNameGenerator: idempotencyStatementNames }));
export const prisma = new PrismaClient({ adapter });
// A retry's read of its record goes straight through the adapter, on the same pool: no client runtime.
// (An adapter made from a URL, PrismaMariaDb or adapterForUrl's, opens a pool of its own on connect():
// call reads.dispose() on shutdown, or the process never exits.)
const reads = await adapter.connect();

/** Who is calling: a real app reads a session; here, an `x-user-id` header. */
interface Context {
  userId: string;
}

const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter });

export const appRouter = t.router({
  createPayment: t.procedure
    .input(z.object({ amount: z.string().regex(/^\d+(\.\d\d?)?$/) }))
    // After .input(): one payment per (user, Idempotency-Key); a retry gets the stored answer.
    .use(idempotency({ store: prismaStore(prisma, { reads }), scope: ({ ctx }) => ctx.userId }))
    .mutation(async ({ ctx, input }) => {
      // ctx.tx: the transaction the key's record commits in, typed as your Prisma.TransactionClient.
      const payment = await ctx.tx.payment.create({ data: { userId: ctx.userId, amount: input.amount } });
      return { id: payment.id, amount: payment.amount.toFixed(2) };
    }),
});

export type AppRouter = typeof appRouter;

export function createServer() {
  return createHTTPServer({
    router: appRouter,
    // req (the key's header), res (the Idempotent-Replayed header) and info (batches) go on to the middleware.
    createContext: ({ req, res, info }) => ({ req, res, info, userId: String(req.headers['x-user-id']) }),
  });
}
