import { initTRPC, TRPCError } from '@trpc/server';
import { prismaStore } from 'idempotent-mutations/prisma';
import { idempotency } from 'idempotent-mutations/trpc';
import { z } from 'zod';
import type { PrismaClient } from '../../../generated/sqlite/client.js';

export interface Context {
  user: { id: string } | null;
}

const t = initTRPC.context<Context>().create();

/** Signed-in users only: after it, `ctx.user` is no longer `null`. */
const protectedProcedure = t.procedure.use(({ ctx, next }) => {
  if (!ctx.user) throw new TRPCError({ code: 'UNAUTHORIZED' });
  return next({ ctx: { user: ctx.user } });
});

export function createRouter(prisma: PrismaClient) {
  // One idempotent base for every route; each route adds its own .input(). `scope` sees the
  // context the auth middleware narrowed, and the fingerprint hashes the input as sent.
  const idempotentProcedure = protectedProcedure.use(
    idempotency({ store: prismaStore(prisma), scope: ({ ctx }) => ctx.user.id, fingerprintInput: 'raw' }),
  );

  return t.router({
    createPayment: idempotentProcedure
      .input(z.object({ amount: z.string().regex(/^\d+(\.\d\d?)?$/), currency: z.string().length(3) }))
      .mutation(({ ctx, input }) => ctx.tx.payment.create({ data: { userId: ctx.user.id, ...input } })),
    // No .input(): the key comes in the Idempotency-Key header, or as the input { idempotencyKey }.
    payMonthlyFee: idempotentProcedure.mutation(({ ctx }) =>
      ctx.tx.payment.create({ data: { userId: ctx.user.id, amount: '5', currency: 'EUR' } }),
    ),
  });
}

export type AppRouter = ReturnType<typeof createRouter>;
