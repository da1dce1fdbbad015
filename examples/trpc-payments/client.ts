// The client side: idempotencyLink gives every mutation one key and retries lost responses, 409
// and 503 with that same key, so a flaky network can never charge twice.
//
//   npx tsx --conditions=source examples/trpc-payments/client.ts     (with the server running)
import { Decimal } from '@prisma/client/runtime/client';
import { createTRPCClient, httpLink } from '@trpc/client';
import { idempotencyHeaders, idempotencyLink } from 'idempotent-mutations/client';
import superjson from 'superjson';
import { isMain } from '../shared/is-main.js';
import type { AppRouter } from './app.js';

// The server's registration (app.ts), on this side of the wire: payments come back with Decimals.
superjson.registerCustom<Decimal, string>(
  {
    isApplicable: (value): value is Decimal => Decimal.isDecimal(value),
    serialize: (value) => value.toJSON(),
    deserialize: (text) => new Decimal(text),
  },
  'decimal.js',
);

// #region readme
export function createPaymentsClient(url: string, userId: string) {
  return createTRPCClient<AppRouter>({
    links: [
      idempotencyLink({ retry: { attempts: 5, baseDelayMs: 250, maxDelayMs: 10_000 } }),
      httpLink({
        url,
        transformer: superjson, // with the Decimal registered above, as on the server
        // The link puts the key in the operation's context; this sends it as Idempotency-Key.
        headers: ({ op }) => ({ ...idempotencyHeaders({ op }), 'x-user-id': userId }),
      }),
    ],
  });
}
// #endregion readme

if (isMain(import.meta.url)) {
  const client = createPaymentsClient(process.env.URL ?? 'http://127.0.0.1:3000', 'alice');
  const payment = await client.createPayment.mutate({ amount: '12.50', currency: 'EUR' });
  console.log('created', payment);
}
