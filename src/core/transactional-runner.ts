import {
  answer,
  type Call,
  claimFailure,
  type IdempotentResult,
  ranRecord,
  stillRunning,
  storedErrorText,
  storedText,
} from './call.js';
import { decide, foreignRecordError } from './decide.js';
import { IdempotencyKeyInProgressError, isIdempotencyError } from './errors.js';
import { type HeldKeys, hold } from './single-flight.js';
import {
  type ClaimOutcome,
  type Completed,
  type Completion,
  dateCopy,
  type TransactionSession,
} from './store.js';
import { withMembers } from './with-members.js';

/**
 * What the transaction ended with: the resolver ran, or it threw a replayable error kept as the
 * key's result, or another call's record answers.
 */
type Outcome<T> =
  | { kind: 'ran'; value: T; firstSeenAt: Date; completed: Promise<Completed>; resultBytes: number }
  | { kind: 'kept'; error: unknown; completed: Promise<Completed>; resultBytes: number }
  | { kind: 'existing'; answer: () => IdempotentResult<T> };

/**
 * The resolver's error in the transaction's last attempt: whether `replayErrors` accepts it, and
 * whether the transaction was keeping it.
 */
interface ResolverError {
  error: unknown;
  replayable: boolean;
  keeping: boolean;
}

/**
 * Transactional mode: one store transaction claims the key, runs the resolver with the
 * transaction client, stores the serialized result and commits, so a failure anywhere leaves
 * nothing behind. The key is marked held in this process (`held`) until the transaction ends.
 */
export async function runInTransaction<T, Tx>(
  call: Call<T, Tx>,
  held: HeldKeys,
  id: string,
  /** What the call has already waited for calls of this process holding its key. */
  waitedMs = 0,
): Promise<IdempotentResult<T>> {
  const { store, request, waitTimeoutMs } = call;
  const transaction = store.transaction?.bind(store);
  if (!transaction) throw new TypeError("This store supports mode: 'lease' only");
  let resolverError: ResolverError | undefined;

  // The wait for a concurrent holder is bounded here, around the whole transaction: a database
  // cannot roll back a transaction whose statement is still waiting for a lock, so an answer that
  // waited for the rollback would wait for the holder after all. It is counted from the
  // transaction's start, once it has its connection: a database slow to connect is the store's
  // failure (unavailable), not a holder still running. What the call waited in this process for
  // another call of its key comes off it: `waitTimeoutMs` bounds both waits together.
  let abandoned = false;
  let waitTimer: NodeJS.Timeout | undefined;
  let giveUp: (error: Error) => void = () => undefined;
  const waited = new Promise<never>((_, reject) => {
    giveUp = reject;
  });
  const startWaitTimer = () => {
    waitTimer ??= setTimeout(
      () => {
        abandoned = true;
        const error = stillRunning(call);
        // The claim is still waiting: its phase ends with this answer, before the call does.
        call.tracking?.finish('claim', error);
        call.emit('in_progress');
        giveUp(error);
      },
      Math.max(0, waitTimeoutMs - waitedMs),
    );
  };

  const { tracking } = call;
  const running = transaction(async (session: TransactionSession<Tx>): Promise<Outcome<T>> => {
    resolverError = undefined;
    startWaitTimer();
    // The store runs this again after a write conflict: the attempts are the observer's retries.
    if (tracking) tracking.attempts++;
    tracking?.start('claim');
    let claimed: Awaited<ReturnType<typeof claimOrTakeOver<T, Tx>>>;
    try {
      claimed = await claimOrTakeOver(call, session, () => abandoned);
    } catch (error) {
      // Abandoned: the timer already answered, and ended the phase. Otherwise the claim's failure
      // answers (`claimFailure`), and the timer must not answer again while the store rolls back.
      if (!abandoned) {
        clearTimeout(waitTimer);
        waitTimer = undefined;
        tracking?.finish('claim', error);
      }
      throw error;
    }
    tracking?.finish('claim');
    clearTimeout(waitTimer);
    // Claimed or answered: a transaction run again (a write conflict) bounds its own claim's wait.
    waitTimer = undefined;
    if ('answer' in claimed) return { kind: 'existing', answer: claimed.answer };
    // A replayable error is kept in this transaction: the claim stays locked until it commits, so
    // a duplicate waiting for the key replays the error instead of claiming the key and running.
    const backToClaim = call.replayErrors && (await session.savepoint?.());
    // The resolver's own Date: one it changes is not the answer's.
    const info = withMembers(request, { firstSeenAt: dateCopy(claimed.firstSeenAt) });
    let value: T;
    tracking?.start('resolver');
    try {
      value = await call.resolver(session.tx, info);
    } catch (error) {
      tracking?.finish('resolver', error);
      resolverError = { error, replayable: call.replayErrors?.(error) === true, keeping: false };
      if (!backToClaim || !resolverError.replayable) throw error;
      const result = storedErrorText(call, error);
      if (result === undefined) throw error; // Unstorable: the key simply stays retryable.
      // The store's own failure (a write conflict), or the database ended the transaction (its
      // rollback undid the mark): thrown, and kept after the rollback as by a store without savepoints.
      if (!(await backToClaim(error).catch(() => false))) throw error;
      resolverError.keeping = true;
      return { kind: 'kept', error, ...(await completing(call, session, result, true)) };
    }
    tracking?.finish('resolver');
    const result = storedText(call.serializer, value, call.maxResultBytes);
    return {
      kind: 'ran',
      value,
      firstSeenAt: claimed.firstSeenAt,
      ...(await completing(call, session, result, false)),
    };
  });
  // Once abandoned, nobody awaits the transaction; its rollback must not go unhandled.
  running.catch(() => undefined);
  const release = hold(held, id);
  try {
    let outcome: Outcome<T>;
    let completed: Completed | undefined;
    try {
      outcome = await Promise.race([running, waited]);
      if (outcome.kind !== 'existing') completed = await outcome.completed;
    } catch (error) {
      throw await failureAnswer(call, error, resolverError);
    }
    if (outcome.kind === 'existing') return outcome.answer();
    // Committed: only now is the result stored (an attempt whose COMMIT failed stored nothing).
    if (call.tracking) call.tracking.resultBytes = outcome.resultBytes;
    call.emit('completed');
    if (outcome.kind === 'kept') throw outcome.error;
    return {
      value: outcome.value,
      replayed: false,
      record: ranRecord(call, outcome.firstSeenAt, completed!),
    };
  } finally {
    clearTimeout(waitTimer);
    release();
  }
}

/**
 * Stores the call's result (or kept error) in its transaction. Where the store sends the completion
 * with its commit, `completed` is not awaited here: the transaction answers for it.
 */
async function completing<T, Tx>(
  call: Call<T, Tx>,
  session: TransactionSession<Tx>,
  result: string,
  resultIsError: boolean,
): Promise<{ completed: Promise<Completed>; resultBytes: number }> {
  const { tracking } = call;
  tracking?.start('store');
  const completion = completionOf(call, result, resultIsError);
  // A `complete` that throws at once fails the promise, as one that rejects does.
  const completed = new Promise<Completed>((resolve) => resolve(session.complete(completion))).then(
    (times) => {
      tracking?.finish('store');
      return times;
    },
    (error: unknown) => {
      tracking?.finish('store', error);
      throw error;
    },
  );
  if (session.completesWithCommit) completed.catch(() => undefined);
  else await completed;
  return { completed, resultBytes: Buffer.byteLength(result, 'utf8') };
}

/**
 * What a failed transaction answers. A replayable error of the resolver's is the answer even when
 * it could not be kept (nothing committed; the key stays free), not the store's failure; one the
 * transaction did not keep (no savepoint, the database ended the transaction, or keeping it there
 * failed) is kept by a transaction of its own.
 */
async function failureAnswer<T, Tx>(
  call: Call<T, Tx>,
  error: unknown,
  resolverError: ResolverError | undefined,
): Promise<unknown> {
  if (
    resolverError &&
    (resolverError.keeping || (resolverError.error === error && resolverError.replayable))
  ) {
    await storeError(call, resolverError.error).catch(() => undefined);
    return resolverError.error;
  }
  // The store's own verdict, not one the resolver threw (a nested call's): this call's transaction
  // rolled back, and its key is free.
  if (
    isIdempotencyError(error) &&
    error.code === 'IDEMPOTENCY_OUTCOME_UNKNOWN' &&
    error !== resolverError?.error
  ) {
    call.emit('outcome_unknown');
  }
  return error;
}

/**
 * Claims the key inside the transaction, taking over a record that is no longer live; or says
 * how to answer from the live record another call committed.
 */
async function claimOrTakeOver<T, Tx>(
  call: Call<T, Tx>,
  session: TransactionSession<Tx>,
  abandoned: () => boolean,
): Promise<{ firstSeenAt: Date } | { answer: () => IdempotentResult<T> }> {
  const claimRequest = withMembers(call.request, { ttlMs: call.ttlMs });
  let claimed: ClaimOutcome;
  try {
    claimed = await session.claim(claimRequest);
  } catch (error) {
    // Our own wait ran out first and already answered IN_PROGRESS.
    if (abandoned()) throw new AbandonedClaim();
    throw claimFailure(call, error);
  }
  // We already answered IN_PROGRESS: roll back without running anything.
  if (abandoned()) throw new AbandonedClaim();
  if (claimed.claimed) {
    call.emit('claimed');
    return claimed;
  }
  const { existing } = claimed;
  const decision = decide(existing, call.request);
  switch (decision.kind) {
    case 'foreign':
      throw foreignRecordError(existing, call.request);
    case 'claim':
    case 'takeOver': {
      const firstSeenAt = await session.takeOver(claimRequest);
      // It waited for the record's row, perhaps past our own wait: roll back without running anything.
      if (abandoned()) throw new AbandonedClaim();
      call.emit('expired_takeover');
      return { firstSeenAt };
    }
    default:
      // The record was not live at the first read (or the call waited for its holder's row): this
      // call waited for a duplicate.
      if (call.tracking) call.tracking.waited = true;
      return { answer: () => answer(call, existing, decision) };
  }
}

/**
 * The failed transaction rolled back the resolver's writes and its claim; a replayable error is
 * kept by a transaction of its own, which claims the key again (or takes over a record no longer
 * live), unless a retry already claimed it in between.
 */
async function storeError<T, Tx>(call: Call<T, Tx>, error: unknown): Promise<void> {
  const result = storedErrorText(call, error);
  if (result === undefined) return; // Unstorable: the key simply stays retryable.
  const { tracking } = call;
  tracking?.start('store');
  const stored = await call.store.transaction!(async (session) => {
    const claimRequest = withMembers(call.request, { ttlMs: call.ttlMs });
    let claimed: ClaimOutcome;
    try {
      claimed = await session.claim(claimRequest);
    } catch (failure) {
      // A retry holds the key (the database stopped waiting for it): it answers for the key now.
      if (failure instanceof IdempotencyKeyInProgressError) return false;
      throw failure;
    }
    if (!claimed.claimed) {
      const { kind } = decide(claimed.existing, call.request);
      if (kind !== 'takeOver') return false;
      await session.takeOver(claimRequest);
    }
    await session.complete(completionOf(call, result, true));
    return true;
  }).catch((failure: unknown) => {
    tracking?.finish('store', failure);
    throw failure;
  });
  if (tracking && stored) tracking.resultBytes = Buffer.byteLength(result, 'utf8');
  tracking?.finish('store');
  if (stored) call.emit('completed');
}

/** What the store is given to keep as the call's result (or kept error). */
function completionOf<T, Tx>(call: Call<T, Tx>, result: string, resultIsError: boolean): Completion {
  const { scope, key } = call.request;
  return { scope, key, result, resultIsError, ttlMs: call.ttlMs };
}

/** Thrown inside a transaction whose caller already got `IDEMPOTENCY_KEY_IN_PROGRESS`. */
class AbandonedClaim extends Error {
  override name = 'AbandonedClaim';
}
