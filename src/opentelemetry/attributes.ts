/**
 * The attribute names this package writes on spans and metric points. No semantic convention
 * covers idempotency, so these are ours; they are part of the public contract and stay stable.
 */

/** How the call ended: see `IdempotencyOutcome` (executed, replayed, waited_then_replayed, …). */
export const ATTR_OUTCOME = 'idempotency.outcome';
/** `transactional` or `lease`. */
export const ATTR_MODE = 'idempotency.mode';
/** The tRPC path, the GraphQL field coordinate, or `mutation <name>` for an operation-level key. */
export const ATTR_OPERATION = 'idempotency.operation';
/** Where the key came from: `header`, `input` (tRPC) or `argument` (GraphQL field). */
export const ATTR_KEY_SOURCE = 'idempotency.key_source';
/** `true` when the client said it never sent the key before (`Idempotency-Attempt: 1`): no read came first. */
export const ATTR_FIRST_ATTEMPT = 'idempotency.first_attempt';
/** The SHA-256 of the key, in hex: correlates a key across logs without revealing it. */
export const ATTR_KEY_HASH = 'idempotency.key_hash';
/** The scope (the principal): written only with `recordScope: true`, as it may be personal data. */
export const ATTR_SCOPE = 'idempotency.scope';
/** How many times the store ran the transaction again after a write conflict. */
export const ATTR_TX_RETRIES = 'idempotency.tx_retries';
/** A step's span (`idempotency.step <name>`): the step's name. */
export const ATTR_STEP_NAME = 'idempotency.step.name';
/** A step's span: where the step runs in its call, 0 for the first. */
export const ATTR_STEP_POSITION = 'idempotency.step.position';
/** A step's span: `true` when its stored result answered it and `fn` did not run (a resumed call). */
export const ATTR_STEP_REPLAYED = 'idempotency.step.replayed';
/** The standard attribute for the class of error a call ended with (its `code`, else its `name`). */
export const ATTR_ERROR_TYPE = 'error.type';

/** The names of the metric instruments. */
export const METRIC_CALLS = 'idempotency.calls';
export const METRIC_WAIT_DURATION = 'idempotency.wait.duration';
export const METRIC_RESOLVER_DURATION = 'idempotency.resolver.duration';
export const METRIC_RESULT_SIZE = 'idempotency.result.size';
export const METRIC_TX_RETRIES = 'idempotency.transaction.retries';
export const METRIC_SWEEP_DELETED = 'idempotency.sweep.deleted';
export const METRIC_STUCK_RECORDS = 'idempotency.records.stuck';
