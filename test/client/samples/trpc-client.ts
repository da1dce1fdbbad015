import { createTRPCClient, httpBatchLink, httpLink } from '@trpc/client';
import { idempotencyHeaders, idempotencyLink, retryingProxyErrors } from 'idempotent-mutations/client';
import superjson from 'superjson';
import type { PaymentsRouter as AppRouter } from '../trpc-payments-server.js';

/** Each mutation gets one key; its retries (lost response, 409, 503) reuse it. */
export function createClient(url: string, token: string) {
  return createTRPCClient<AppRouter>({
    links: [
      idempotencyLink({ retry: { attempts: 5, baseDelayMs: 250, maxDelayMs: 10_000 } }),
      httpLink({
        url,
        transformer: superjson,
        // The key goes in the input, and this sends it as the `Idempotency-Key` header too, with
        // `Idempotency-Attempt` (1, then 2, 3… on retries).
        headers: ({ op }) => ({ ...idempotencyHeaders({ op }), authorization: `Bearer ${token}` }),
        // A proxy's 502 or 504 page (its answer lost) fails as a dropped connection: retried.
        fetch: retryingProxyErrors(),
      }),
    ],
  });
}

/** With batching, calls share one set of headers: each key travels in its call's input. */
export function createBatchClient(url: string, token: string) {
  return createTRPCClient<AppRouter>({
    links: [
      idempotencyLink(), // the key goes in the input as `idempotencyKey` (sendKeyIn: 'input')
      httpBatchLink({
        url,
        transformer: superjson,
        // No key header on a batch; `Idempotency-Attempt` says whether it holds a retry.
        headers: ({ opList }) => ({ ...idempotencyHeaders({ opList }), authorization: `Bearer ${token}` }),
        fetch: retryingProxyErrors(),
      }),
    ],
  });
}
