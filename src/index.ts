/**
 * idempotent-mutations: the framework-free core. The integrations live in subpaths:
 * `/prisma`, `/trpc`, `/envelop`, `/client`.
 */
export * from './core/errors.js';
export type { IdempotencyEvent, IdempotencyEventHandler, IdempotencyEventType } from './core/events.js';
export { canonicalJson, type FingerprintOptions, fingerprint } from './core/fingerprint.js';
export { type HeaderValue, type KeyPolicy, parseKeyHeader, resolveKey, validateKey } from './core/key.js';
export { type MemoryStoreOptions, memoryStore } from './core/memory-store.js';
export {
  type ClaimInfo,
  defaultErrorCodec,
  type ErrorCodec,
  type IdempotentResult,
  type RecordInfo,
  type RunIdempotentOptions,
  resolveScope,
  runIdempotent,
} from './core/run-idempotent.js';
export { type DecimalConstructor, type Serializer, superjsonSerializer } from './core/serializer.js';
export {
  type ClaimOutcome,
  type Completion,
  isLive,
  type LeaseClaim,
  type LeaseClaimOutcome,
  type LeaseOperations,
  type LeaseOwner,
  type ModeDefaults,
  type NewClaim,
  type RecordStatus,
  type Store,
  type StoredRecord,
  type TransactionRequest,
  type TransactionSession,
} from './core/store.js';
