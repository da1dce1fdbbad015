// The client side: idempotentFetch wraps fetch for any GraphQL client (urql, Apollo's HttpLink,
// graphql-request take a `fetch`): mutations get an Idempotency-Key and retries reuse it.
//
//   npx tsx --conditions=source examples/yoga-orders/client.ts      (with the server running)
import { idempotentFetch } from 'idempotent-mutations/client/fetch';
import { isMain } from '../shared/is-main.js';

// #region readme
const fetchWithRetries = idempotentFetch(fetch, { retry: { attempts: 5 } });

/** Operation-level: idempotentFetch sends the key as a header and retries with it. */
export async function createOrder(url: string, userId: string, sku: string, quantity: number) {
  const response = await fetchWithRetries(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-user-id': userId },
    body: JSON.stringify({
      query: `mutation Order($input: OrderInput!) {
        createOrder(input: $input) { id sku quantity total }
      }`,
      variables: { input: { sku, quantity, unitPrice: '4.20' } },
    }),
  });
  return (await response.json()) as {
    data?: { createOrder: { id: number; total: string } };
    errors?: unknown[];
  };
}
// #endregion readme

if (isMain(import.meta.url)) {
  console.log(await createOrder(process.env.URL ?? 'http://127.0.0.1:4000/graphql', 'alice', 'TEA-01', 2));
}
