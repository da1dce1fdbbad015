/** idempotent-mutations/trpc: the tRPC v11 middleware. */

export type { HeadersLike } from '../core/headers.js';
export {
  type IdempotencyErrorData,
  idempotencyErrorData,
  idempotencyErrorFormatter,
  toTRPCError,
  trpcCodeOf,
  trpcErrorCodec,
} from './errors.js';
export {
  type IdempotencyContext,
  type IdempotencyContextOverrides,
  type IdempotencyMeta,
  type IdempotencyMiddleware,
  type IdempotencyOptions,
  type IdempotencyPolicy,
  idempotency,
  type ScopeOptions,
} from './idempotency.js';
