/** idempotent-mutations/envelop: the Envelop plugin (GraphQL Yoga and any Envelop-based server). */
export { type IdempotentField, idempotentDirectiveTypeDefs } from './directive.js';
export { graphqlErrorCodec } from './graphql-error.js';
export {
  type IdempotencyExtension,
  type IdempotencyResolverContext,
  type ScopeValue,
  type UseIdempotencyOptions,
  useIdempotency,
} from './use-idempotency.js';
