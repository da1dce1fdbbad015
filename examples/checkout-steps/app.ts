// #region readme
import { Decimal } from '@prisma/client/runtime/client';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { prismaStore } from 'idempotent-mutations/prisma';
import { idempotency, idempotencyErrorFormatter } from 'idempotent-mutations/trpc';
import { z } from 'zod';
import type { PrismaClient } from '../../generated/sqlite/client.js';
import { authenticate, type Context } from '../trpc-payments/app.js';

/**
 * The payment gateway, outside the database. Like Stripe's API it takes an idempotency key: a
 * charge sent again with the same key is not charged again.
 */
export interface PaymentGateway {
  charge(request: { userId: string; amount: string; idempotencyKey: string }): Promise<{ chargeId: string }>;
}

/** Options of the checkout app; `afterStep` lets the demo and the tests crash the server mid-checkout. */
export interface CheckoutOptions {
  gateway: PaymentGateway;
  /** How long a checkout holds its key before another server may take it over. @default 30_000 */
  leaseMs?: number;
  afterStep?: (name: string) => Promise<void> | void;
}

const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter });

export function createCheckoutRouter(prisma: PrismaClient, { gateway, leaseMs, afterStep }: CheckoutOptions) {
  const store = prismaStore(prisma);
  return t.router({
    checkout: t.procedure
      .input(z.object({ sku: z.string(), amount: z.string().regex(/^\d+(\.\d\d?)?$/) }))
      // Lease mode: the gateway is outside the database, so nothing can roll it back.
      .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id, mode: 'lease', leaseMs }))
      .mutation(async ({ ctx, input }) => {
        const { step } = ctx.idempotency!;
        const userId = ctx.user.id;
        // 1. An atomic phase: the order row and the step's record commit together.
        const order = await step(
          'reserve',
          ({ tx }) => tx.order.create({ data: { userId, sku: input.sku, quantity: 1, total: input.amount } }),
          { transactional: true },
        );
        await afterStep?.('reserve');
        // 2. The gateway gets the step's own key: a charge that went through just before a crash
        //    (its record not yet stored) is not charged twice when the retry runs this step again.
        const { chargeId } = await step('charge', ({ key }) =>
          gateway.charge({ userId, amount: input.amount, idempotencyKey: key }),
        );
        await afterStep?.('charge');
        // 3. Stored like the others: a retry after this point sends no second receipt.
        const receipt = await step(
          'receipt',
          ({ tx }) =>
            tx.order.create({
              data: { userId, sku: `receipt:${chargeId}`, quantity: 0, total: new Decimal(0) },
            }),
          { transactional: true },
        );
        await afterStep?.('receipt');
        return { orderId: order.id, chargeId, receiptId: receipt.id };
      }),
  });
}
// #endregion readme

export type CheckoutRouter = ReturnType<typeof createCheckoutRouter>;

export function createCheckoutServer(prisma: PrismaClient, options: CheckoutOptions) {
  return createHTTPServer({
    router: createCheckoutRouter(prisma, options),
    createContext: async ({ req, res, info }) => ({ req, res, info, user: await authenticate(req) }),
  });
}

/**
 * A stand-in for the gateway that keeps its charges in the `payments` table and, as a real one
 * does, answers a key it has seen with the charge it made for it (within this process).
 */
export function tableGateway(prisma: PrismaClient): PaymentGateway {
  const charged = new Map<string, Promise<{ chargeId: string }>>();
  return {
    charge({ userId, amount, idempotencyKey }) {
      let charge = charged.get(idempotencyKey);
      if (!charge) {
        charge = prisma.payment
          .create({ data: { userId, amount: new Decimal(amount), currency: 'EUR' } })
          .then((payment) => ({ chargeId: `ch_${payment.id}` }));
        charged.set(idempotencyKey, charge);
      }
      return charge;
    },
  };
}
