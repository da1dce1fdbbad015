/**
 * idempotent-mutations/client/fetch: `idempotentFetch` alone, for GraphQL clients (urql, Apollo,
 * graphql-request, plain `fetch`). It loads no tRPC package, so an app without `@trpc/*` installed
 * can use it; `idempotent-mutations/client` also exports it, next to the tRPC link.
 */
export { type FetchFunction, type IdempotentFetchOptions, idempotentFetch } from './idempotent-fetch.js';
export type { ActiveSpanSource } from './resend-count.js';
export type { RetryOptions } from './retry-policy.js';
