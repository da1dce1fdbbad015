/**
 * idempotent-mutations: the framework-free core. The integrations live in subpaths:
 * `/prisma`, `/trpc`, `/envelop`, `/client`, `/opentelemetry`.
 */

export { ATTEMPT_HEADER, isFirstAttempt } from './core/attempt-header.js';
export { type Decision, decide, type RecordRequest } from './core/decide.js';
export * from './core/errors.js';
export type { IdempotencyEvent, IdempotencyEventHandler, IdempotencyEventType } from './core/events.js';
export { canonicalJson, type FingerprintOptions, fingerprint } from './core/fingerprint.js';
export { type HeaderValue, type KeyPolicy, parseKeyHeader, resolveKey, validateKey } from './core/key.js';
export { type MemoryStoreOptions, memoryStore } from './core/memory-store.js';
export type {
  CallObserver,
  CallSummary,
  IdempotencyKeySource,
  IdempotencyOutcome,
  IdempotencyPhase,
  ObserveCall,
  ObservedCall,
  ObservedStep,
} from './core/observer.js';
export { type LocalCacheOptions, withLocalCache } from './core/record-cache.js';
export {
  type ClaimInfo,
  defaultErrorCodec,
  type ErrorCodec,
  type IdempotentResult,
  type RecordInfo,
  type Resolver,
  type ResolverClaim,
  type RunIdempotentOptions,
  resolveScope,
  runIdempotent,
} from './core/run-idempotent.js';
export { type DecimalConstructor, type Serializer, superjsonSerializer } from './core/serializer.js';
export { type Step, type StepContext, type StepOptions, stepKey } from './core/steps.js';
export type {
  ClaimOutcome,
  ClaimRequest,
  Completion,
  LeaseOperations,
  LeaseOwner,
  LeaseRequest,
  ModeDefaults,
  RecordStatus,
  StepOperations,
  StepRecord,
  StepSession,
  StepWrite,
  Store,
  StoredRecord,
  TransactionSession,
} from './core/store.js';
