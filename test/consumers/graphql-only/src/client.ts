import { idempotentFetch } from 'idempotent-mutations/client/fetch';

/**
 * idempotentFetch gives each mutation an Idempotency-Key and retries it (network failures, 409,
 * 503) with that same key; urql, Apollo and graphql-request take it as their `fetch`.
 */
export function createCharge(url: string, generateKey?: () => string) {
  const fetchWithRetries = idempotentFetch(fetch, { retry: { attempts: 5 }, generateKey });
  return async (amount: string) => {
    const response = await fetchWithRetries(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        query: 'mutation Charge($amount: String!) { charge(amount: $amount) }',
        variables: { amount },
      }),
    });
    return (await response.json()) as {
      data: { charge: string };
      extensions: { idempotency: { key: string; replayed: boolean } };
    };
  };
}
