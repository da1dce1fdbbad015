import { idempotentFetch } from 'idempotent-mutations/client/fetch';

/** urql (`fetch`), Apollo (`HttpLink({ fetch })`) and graphql-request take it the same way. */
const fetchWithRetries = idempotentFetch(fetch, { retry: { attempts: 5 } });

export async function createPayment(url: string, token: string, amount: string) {
  const response = await fetchWithRetries(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({
      query: `mutation Pay($amount: String!) {
        createPayment(amount: $amount, currency: "EUR") { id amount createdAt }
      }`,
      variables: { amount },
    }),
  });
  return (await response.json()) as {
    data?: { createPayment: { id: number; amount: string; createdAt: string } };
  };
}
