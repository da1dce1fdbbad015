import type { IncomingHttpHeaders } from 'node:http';
import { Decimal } from '@prisma/client/runtime/client';
import { initTRPC, TRPCError } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import type { IdempotencyEvent } from 'idempotent-mutations';
import { prismaStore } from 'idempotent-mutations/prisma';
import { idempotency, idempotencyErrorFormatter } from 'idempotent-mutations/trpc';
import superjson from 'superjson';
import { z } from 'zod';
import type { PrismaClient } from '../../generated/sqlite/client.js';

// Dates and Prisma Decimals cross the wire intact (register the same on the client).
superjson.registerCustom<Decimal, string>(
  {
    isApplicable: (value): value is Decimal => Decimal.isDecimal(value),
    serialize: (value) => value.toJSON(),
    deserialize: (text) => new Decimal(text),
  },
  'decimal.js',
);

export interface Context {
  user: { id: string };
}

export const t = initTRPC.context<Context>().create({
  transformer: superjson,
  // Puts e.g. `IDEMPOTENCY_KEY_MISMATCH` in the client's `error.data.idempotencyCode`.
  errorFormatter: idempotencyErrorFormatter,
});

export const SPENDING_LIMIT = new Decimal(10_000);

/** `onEvent` sees every claim, replay, mismatch and conflict: wire it to your logs or metrics. */
export interface AppOptions {
  onEvent?: (event: IdempotencyEvent) => void;
}

export function createAppRouter(prisma: PrismaClient, { onEvent }: AppOptions = {}) {
  const store = prismaStore(prisma);

  return t.router({
    createPayment: t.procedure
      .input(z.object({ amount: z.string().regex(/^\d+(\.\d\d?)?$/), currency: z.string().length(3) }))
      // After .input(): the fingerprint is taken over the validated input.
      .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id, onEvent }))
      .mutation(async ({ ctx, input }) => {
        // ctx.tx is the transaction the key's record commits in: one payment per key, or none.
        const payment = await ctx.tx.payment.create({
          data: { userId: ctx.user.id, amount: new Decimal(input.amount), currency: input.currency },
        });
        const spent = await ctx.tx.payment.aggregate({
          where: { userId: ctx.user.id },
          _sum: { amount: true },
        });
        if (spent._sum.amount?.greaterThan(SPENDING_LIMIT)) {
          // Rolls back the payment and the key's record alike: a retry may try again.
          throw new TRPCError({ code: 'FORBIDDEN', message: 'Over the spending limit' });
        }
        return payment;
      }),
  });
}

export type AppRouter = ReturnType<typeof createAppRouter>;

export function createServer(prisma: PrismaClient, options?: AppOptions) {
  return createHTTPServer({
    router: createAppRouter(prisma, options),
    // Pass req, res and info on: the key is read from req's headers, a replay is signalled on res,
    // and info tells a batch from a single call.
    createContext: async ({ req, res, info }) => ({ req, res, info, user: await authenticate(req) }),
  });
}

/**
 * A stand-in for authentication, which the tests use: the user id is whatever `X-User-Id` says.
 * Replace it with your own (a session cookie, a verified JWT, …).
 */
export async function authenticate(req: {
  headers: IncomingHttpHeaders | Headers;
}): Promise<Context['user']> {
  const id = req.headers instanceof Headers ? req.headers.get('x-user-id') : req.headers['x-user-id'];
  if (typeof id !== 'string' || id === '') throw new TRPCError({ code: 'UNAUTHORIZED' });
  return { id };
}
