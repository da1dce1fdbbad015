/**
 * idempotent-mutations/client: clients that retry mutations safely, reusing one idempotency key
 * per logical mutation. `idempotencyLink` for `@trpc/client` v11, `idempotentFetch` for GraphQL
 * clients that accept a custom `fetch`.
 */
export { type IdempotencyLinkOptions, idempotencyHeaders, idempotencyLink } from './idempotency-link.js';
export { type FetchFunction, type IdempotentFetchOptions, idempotentFetch } from './idempotent-fetch.js';
export { CutOffAnswerError, type PassingFetch, retryingProxyErrors } from './proxy-answers.js';
export type { ActiveSpanSource } from './resend-count.js';
export type { RetryOptions } from './retry-policy.js';
