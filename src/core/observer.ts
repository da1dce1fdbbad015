/**
 * The observation hook of `runIdempotent`: one stable interface through which a tracer or a
 * metrics library (`idempotent-mutations/opentelemetry`, or your own) sees the start and end of a
 * call and of its phases. `onEvent` stays for simple logs; this is the richer contract.
 *
 * A call's phases, in the order they can happen:
 *
 * - `wait`: the call waits for a duplicate of this process that holds its key (transactional
 *   mode's single flight). Only reported when there was such a duplicate.
 * - `claim`: the store claims the key (in transactional mode inside the transaction, where it
 *   also waits for a duplicate of another process holding the key's row).
 * - `resolver`: the user's resolver runs.
 * - `store`: the result (or a replayable error) is stored (where the store sends it with the
 *   commit, on PostgreSQL, it ends when the commit is answered).
 *
 * Everything here is called synchronously from the call's own flow; an observer that throws is
 * ignored, and an unset `observe` costs one `undefined` check per step.
 */

/** Where the key came from, as the integration read it. */
export type IdempotencyKeySource = 'header' | 'input' | 'argument';

/**
 * How a call ended, the values of `idempotency.outcome`:
 *
 * - `executed`: the key was free; the resolver ran (its result or error is the answer).
 * - `expired_takeover`: the key held an expired record or a lapsed lease; the resolver ran.
 * - `replayed`: a stored result was returned from the first read; the resolver did not run.
 * - `waited_then_replayed`: a duplicate held the key when this call arrived; this call waited
 *   for it and replayed its result.
 * - `mismatch`: the key was used with another operation or input.
 * - `in_progress`: another request still held the key (`IDEMPOTENCY_KEY_IN_PROGRESS`).
 * - `released`: lease mode; the resolver failed and the call freed its claim.
 * - `fenced`: lease mode; the lease was taken over, so this call's completion wrote nothing.
 * - `outcome_unknown`: the resolver ran, but its result could not be stored (lease mode), or the store
 *   cannot tell what of it committed (transactional mode, MariaDB).
 */
export type IdempotencyOutcome =
  | 'executed'
  | 'expired_takeover'
  | 'replayed'
  | 'waited_then_replayed'
  | 'mismatch'
  | 'in_progress'
  | 'released'
  | 'fenced'
  | 'outcome_unknown';

/** The phases of a call; see the module's documentation. */
export type IdempotencyPhase = 'wait' | 'claim' | 'resolver' | 'store';

/** What an observer is told about a call when it starts. */
export interface ObservedCall {
  /** The scope (the principal); may be personal data. */
  scope: string;
  /** The raw key: hash it before it leaves the process. */
  key: string;
  operation: string;
  fingerprint: string;
  mode: 'transactional' | 'lease';
  /** Where the key came from; `undefined` when `runIdempotent` is called directly without it. */
  keySource: IdempotencyKeySource | undefined;
  /** The client said it never sent this key before (`Idempotency-Attempt: 1`, `firstAttempt`). */
  firstAttempt: boolean;
}

/** A lease-mode step (`step(name, fn)`) as an observer sees it. */
export interface ObservedStep {
  /** The step's name. */
  name: string;
  /** Where it runs in its call: 0 for the first. */
  position: number;
  /** The step's stored result (or error) answers it: `fn` does not run (a resumed call). */
  replayed: boolean;
}

/** How a call ended. */
export interface CallSummary {
  /** `undefined` when the call failed before it reached a decision (e.g. the store was unreachable). */
  outcome: IdempotencyOutcome | undefined;
  /** Whether the call ended with an error rather than a value (its own or a replay). */
  failed: boolean;
  /**
   * The error the call ends with, when `failed`: whatever was thrown, `undefined` included;
   * `undefined` when it returned a value.
   */
  error: unknown;
  /**
   * How many times the store ran the transaction again after a write conflict, deadlock or
   * serialization failure (transactional mode; 0 in lease mode).
   */
  txRetries: number;
  /** The stored result's size in UTF-8 bytes, when this call stored one. */
  resultBytes: number | undefined;
  /** Milliseconds, on the call's clock, from the start of the call to its end. */
  durationMs: number;
}

/**
 * Receives one call's progress. Every member is optional except `end`. Times are on the call's
 * monotonic clock (`clock`, `performance.now` by default).
 */
export interface CallObserver {
  /**
   * Runs the rest of the call (the store's statements and the resolver included). A tracer runs
   * it inside its span's context, so the spans of Prisma and of the resolver become its children.
   * It must call `run` once and return what it returns.
   */
  around?<R>(run: () => R): R;
  /** A phase started. */
  phaseStart?(phase: IdempotencyPhase, at: number): void;
  /** A phase ended; `error` when it threw. */
  phaseEnd?(phase: IdempotencyPhase, at: number, error?: unknown): void;
  /**
   * Runs one step of a lease-mode call, inside the `resolver` phase: `fn` and the store of its
   * result, or the replay of its stored one. A tracer runs it in a span of its own, so the spans
   * the step makes (the payment gateway's) become that span's children. It must call `run` once
   * and return what it returns.
   */
  step?<R>(step: ObservedStep, run: () => Promise<R>): Promise<R>;
  /** The call ended. Called exactly once, after every phase ended. */
  end(summary: CallSummary): void;
}

/**
 * The hook: called once per keyed call, after its options were checked; returns the call's
 * observer, or `undefined` to leave this call unobserved.
 */
export type ObserveCall = (call: ObservedCall) => CallObserver | undefined;
