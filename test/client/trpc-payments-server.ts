import { initTRPC } from '@trpc/server';
import { type CreateHTTPContextOptions, createHTTPServer } from '@trpc/server/adapters/standalone';
import superjson from 'superjson';
import { z } from 'zod';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { listen } from '../helpers/listen.js';
import { type PaymentsBackend, scopeOf, WAIT_TIMEOUT_MS } from './payments.js';

type Context = Pick<CreateHTTPContextOptions, 'req' | 'res' | 'info'> & { userId: string };

const t = initTRPC
  .context<Context>()
  .create({ transformer: superjson, errorFormatter: idempotencyErrorFormatter });

/** A tRPC router whose `createPayment` goes through the library's `idempotency()` middleware. */
export function paymentsRouter(backend: PaymentsBackend) {
  const idempotent = idempotency({
    store: backend.store,
    scope: ({ ctx }: { ctx: Context }) => ctx.userId,
    waitTimeoutMs: WAIT_TIMEOUT_MS,
    retryAfterMs: 1_000,
  });
  return t.router({
    createPayment: t.procedure
      .input(z.object({ amount: z.string(), currency: z.string() }))
      .use(idempotent)
      .mutation(({ ctx, input }) => backend.writePayment(ctx.tx, ctx.userId, input)),
    /** A mutation without input: its key travels as the header or as the input `{ idempotencyKey }`. */
    payFee: t.procedure
      .use(idempotent)
      .mutation(({ ctx }) => backend.writePayment(ctx.tx, ctx.userId, { amount: '1.00', currency: 'EUR' })),
    paymentCount: t.procedure.query(({ ctx }) =>
      backend.prisma.payment.count({ where: { userId: ctx.userId } }),
    ),
  });
}

/** The router's type, for the typed client. */
export type PaymentsRouter = ReturnType<typeof paymentsRouter>;

/** Serves the router over the standalone adapter on 127.0.0.1 (a free port). */
export async function startTrpcServer(backend: PaymentsBackend) {
  const server = createHTTPServer({
    router: paymentsRouter(backend),
    createContext: ({ req, res, info }) => ({ req, res, info, userId: scopeOf(req.headers.authorization) }),
  });
  return listen(server);
}
