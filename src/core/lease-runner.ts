import { randomBytes } from 'node:crypto';
import {
  answer,
  type Call,
  claimFailure,
  type IdempotentResult,
  OWN_ERROR_BYTES,
  pause,
  ranRecord,
  storedErrorText,
  storedText,
} from './call.js';
import { decide, foreignRecordError } from './decide.js';
import { waitWhileRunning } from './duplicate-wait.js';
import { IdempotencyKeyInProgressError, IdempotencyLeaseLostError, isIdempotencyError } from './errors.js';
import type { IdempotencyEventType } from './events.js';
import { answeredUnread, leaseLostAnswer, outcomeUnknown } from './lease-lost.js';
import { raisedBySteps, StepJournal } from './steps.js';
import {
  type ClaimOutcome,
  type Completed,
  type Completion,
  dateCopy,
  type LeaseOperations,
  type LeaseOwner,
} from './store.js';
import { withMembers } from './with-members.js';

/**
 * Lease mode: the claim commits on its own with a lease and an owner token, the resolver runs
 * outside any transaction, and the result is stored only while the token still holds the key.
 * Once the resolver has run its effects may have happened, so from then on this call never
 * answers with a code that clients retry by themselves unless the record says what happened.
 */
export async function runUnderLease<T, Tx>(options: Call<T, Tx>): Promise<IdempotentResult<T>> {
  let fenced = false;
  const call: Call<T, Tx> = withMembers(options, {
    emit: (type: IdempotencyEventType) => {
      if (type === 'fenced' && fenced) return;
      fenced ||= type === 'fenced';
      options.emit(type);
    },
  } satisfies Partial<Call<T, Tx>>);
  const { lease } = call.store;
  const owner: LeaseOwner = {
    scope: call.request.scope,
    key: call.request.key,
    ownerToken: randomBytes(32).toString('hex'),
  };
  const { tracking } = call;
  const claimedAt = call.clock();
  tracking?.start('claim');
  let claimed: Claimed | IdempotentResult<T>;
  try {
    claimed = await claimLease(call, owner);
  } catch (error) {
    tracking?.finish('claim', error);
    throw error;
  }
  tracking?.finish('claim');
  if (!('tookOver' in claimed)) return claimed;
  const { firstSeenAt, sentAt } = claimed;

  const journal = new StepJournal(call, owner, claimed.tookOver, () => heartbeat.confirm());
  const heartbeat = startHeartbeat(call, lease, owner, claimedAt, sentAt, () => {
    journal.leaseLost();
    call.emit('fenced');
  });
  // Set once the claim is being completed or released (or left to run out on purpose): any other
  // way out of the call releases it below, and the heartbeat stops whichever way the call ends,
  // or once `beatUntil` settles.
  let ended = false;
  let beatUntil: Promise<void> | undefined;
  try {
    // The steps it may resume must live as long as the record it now holds.
    if (claimed.tookOver) await call.store.steps?.keep?.(owner);
    let value: T;
    tracking?.start('resolver');
    try {
      value = await call.resolver(
        lease.client,
        // The resolver's own Date: one it changes is not the answer's.
        withMembers(call.request, { firstSeenAt: dateCopy(firstSeenAt), step: journal.step }),
      );
      journal.finish();
      tracking?.finish('resolver');
    } catch (error) {
      tracking?.finish('resolver', error);
      journal.finish();
      if (journal.stepRunning) {
        // A step still runs beside the failed resolver: its effect may land after this answer.
        // The claim stays, and the heartbeat keeps its lease until the step settles (up to
        // `maxLeaseMs`), so the step can still store its result; then the lease runs out by
        // itself and a retry resumes from it rather than running it again on a freed key.
        // Waiting for it could hang the answer for good.
        ended = true;
        beatUntil = journal.stepSettled();
        throw error;
      }
      const replayable = call.replayErrors?.(error) === true && !raisedBySteps(error);
      const stored = replayable ? storedErrorText(call, error) : undefined;
      ended = true;
      if (stored === undefined) {
        await release(call, owner, heartbeat, journal.holdsSteps);
        throw error;
      }
      // The error answers for the key from now on; if it cannot be kept, the resolver's own error
      // is still the answer (no retryable code) and the lease runs out by itself, unless the key
      // was taken over and its record answers for this call (a 409, as for a value).
      await complete(call, owner, heartbeat, stored, true).catch(unlessAnsweredElsewhere);
      throw error;
    }
    let result: string;
    try {
      result = storedText(call.serializer, value, call.maxResultBytes);
    } catch (error) {
      // The effects happened but the result cannot be kept: the key answers with this error from
      // now on rather than being freed to run them again (however small `maxResultBytes` is); if
      // even that cannot be stored, the lease runs out by itself.
      ended = true;
      const stored = storedErrorText(call, error, Math.max(call.maxResultBytes, OWN_ERROR_BYTES));
      if (stored !== undefined)
        await complete(call, owner, heartbeat, stored, true).catch(unlessAnsweredElsewhere);
      throw error;
    }
    ended = true;
    const completed = await complete(call, owner, heartbeat, result, false);
    return { value, replayed: false, record: ranRecord(call, firstSeenAt, completed) };
  } finally {
    if (beatUntil) void beatUntil.then(heartbeat.stop);
    else heartbeat.stop();
    if (!ended) await release(call, owner, heartbeat, journal.holdsSteps);
  }
}

/**
 * For a completion that stored an error: its failure is not the answer, the error is, except a
 * lost lease whose new owner's record answers for this call. Its answer is what every retry gets,
 * so this call answers the 409 that sends its client there too, never an outcome the key contradicts;
 * and when the record could not be read to tell, `IDEMPOTENCY_OUTCOME_UNKNOWN`.
 */
function unlessAnsweredElsewhere(failure: unknown): void {
  if (failure instanceof IdempotencyLeaseLostError || answeredUnread(failure)) throw failure;
}

/** A claim this call holds: since when, and whether it replaced a record that was no longer live. */
interface Claimed {
  firstSeenAt: Date;
  tookOver: boolean;
  /** When (on the call's clock) the claim that took the key was sent: its lease runs from after it. */
  sentAt: number;
}

/**
 * Claims the key under `owner`'s token, or returns the answer a live record gives. A record that
 * stopped being live between the store's statements is worth another claim; one that keeps doing
 * so is never replayed: the caller retries later.
 */
async function claimLease<T, Tx>(
  call: Call<T, Tx>,
  owner: LeaseOwner,
): Promise<Claimed | IdempotentResult<T>> {
  const started = call.clock();
  for (let attempt = 0; attempt < 3; attempt++) {
    let outcome: ClaimOutcome;
    const sentAt = call.clock();
    try {
      outcome = await call.store.lease.claim(
        withMembers(call.request, { ownerToken: owner.ownerToken, ttlMs: call.ttlMs, leaseMs: call.leaseMs }),
      );
    } catch (error) {
      // E.g. the database stopped waiting for a transactional call that holds the key.
      throw claimFailure(call, error);
    }
    if (outcome.claimed) {
      call.emit(outcome.tookOver ? 'expired_takeover' : 'claimed');
      return { firstSeenAt: outcome.firstSeenAt, tookOver: outcome.tookOver, sentAt };
    }
    // Another call claimed the key first: wait for it as any duplicate does.
    const existing = await waitWhileRunning(call, outcome.existing, started);
    const decision = decide(existing, call.request);
    if (decision.kind === 'foreign') throw foreignRecordError(existing!, call.request);
    if (decision.kind !== 'claim' && decision.kind !== 'takeOver') return answer(call, existing!, decision);
  }
  call.emit('in_progress');
  throw new IdempotencyKeyInProgressError(call.retryAfterMs, {
    message: 'The idempotency key changed hands while this request claimed it: retry with the same key',
  });
}

/**
 * Stores the result under the lease. The heartbeat stops first (a beat answering after the
 * completion must not count as losing the lease). A store that is unavailable is tried again
 * while the lease is surely still ours (by this process's monotonic clock, from before the claim
 * or the last renewal was sent); past that, or on any other failure, the outcome is unknown to
 * every caller: the effects may have happened, and a retry after the lease ran out would run them
 * again.
 */
async function complete<T, Tx>(
  call: Call<T, Tx>,
  owner: LeaseOwner,
  heartbeat: Heartbeat,
  result: string,
  resultIsError: boolean,
): Promise<Completed> {
  const completion = withMembers(owner, { result, resultIsError, ttlMs: call.ttlMs });
  const { tracking } = call;
  heartbeat.stop();
  const heldUntil = heartbeat.heldUntil() - renewalMarginMs(call.leaseMs);
  tracking?.start('store');
  for (let attempt = 0; ; attempt++) {
    try {
      // After a failed try, the completion may have committed and only its answer been lost.
      const completed =
        (await call.store.lease.complete(completion)) ??
        (attempt > 0 ? await committedEarlier(call, completion) : null);
      if (!completed) break;
      if (tracking) tracking.resultBytes = Buffer.byteLength(result, 'utf8');
      tracking?.finish('store');
      call.emit('completed');
      return completed;
    } catch (error) {
      const delay = Math.min(1_000, 25 * 2 ** attempt);
      if (!isUnavailable(error) || call.clock() + delay >= heldUntil) {
        tracking?.finish('store', error);
        throw outcomeUnknown(
          call,
          'The mutation',
          'its result could not be stored while its lease lasted',
          error,
        );
      }
      await pause(delay);
    }
  }
  // Nothing was written: the store phase failed, with the answer the call gives.
  const lost = await leaseLostAnswer(call, owner, 'The mutation');
  tracking?.finish('store', lost);
  throw lost;
}

/**
 * The key's record when it is this call's completion, stored by an earlier try whose answer was
 * lost: completed under this call's owner token (random, the call's alone) with its result.
 */
async function committedEarlier<T, Tx>(
  call: Call<T, Tx>,
  completion: Completion & LeaseOwner,
): Promise<Completed | null> {
  const record = await call.store.find(completion.scope, completion.key);
  const ours =
    record?.status === 'COMPLETED' &&
    record.ownerToken === completion.ownerToken &&
    record.result === completion.result &&
    record.resultIsError === completion.resultIsError;
  return ours ? { completedAt: record.completedAt!, expiresAt: record.expiresAt } : null;
}

/** A store that could not be reached: worth another try while the lease lasts. */
function isUnavailable(error: unknown): boolean {
  return isIdempotencyError(error) && error.code === 'IDEMPOTENCY_STORE_UNAVAILABLE';
}

/**
 * Frees the key for a retry; the resolver's error stays the answer even if this fails. A call
 * that stored steps keeps its claim and ends its lease instead, so the retry takes it over and
 * resumes after the steps that ran: only once the heartbeat's beat in flight has answered, or that
 * renewal, applied after the end, would hold the key for another whole lease.
 */
async function release<T, Tx>(
  call: Call<T, Tx>,
  owner: LeaseOwner,
  heartbeat: Heartbeat,
  keepSteps: boolean,
): Promise<void> {
  const { lease } = call.store;
  heartbeat.stop();
  try {
    let released: boolean;
    if (keepSteps) {
      await heartbeat.settled();
      released = await lease.extend(owner, 0);
    } else released = await lease.release(owner);
    call.emit(released ? 'released' : 'fenced');
  } catch {
    // The lease runs out on its own and the next request takes over.
  }
}

/** How long the end of a lease waits for renewals in flight: a hung one must not hold the answer. */
const SETTLE_MS = 1_000;

/**
 * How long before `heldUntil` the lease is taken to be at risk: a renewal was sent before it
 * applied, and the database's clock may run ahead of the call's.
 */
function renewalMarginMs(leaseMs: number): number {
  return Math.min(1_000, leaseMs / 10);
}

/** A running heartbeat. */
interface Heartbeat {
  /** Until when (on the call's clock) the lease is surely held: from before the last renewal was sent. */
  heldUntil(): number;
  /**
   * Whether the lease is surely held now: by `heldUntil`, else by a renewal sent now, while the
   * heartbeat may still renew (it runs, within `maxLeaseMs`). `false`: the lease may have run out
   * and another request may hold the key (a renewal that found it taken over also calls `onLost`).
   */
  confirm(): Promise<boolean>;
  /** Stops renewing at once: no beat is sent afterwards, and what a beat in flight answers is ignored. */
  stop(): void;
  /** Resolves once the beats in flight (if any) have answered, or `SETTLE_MS` later if one hangs. */
  settled(): Promise<void>;
}

/**
 * Extends the lease every `heartbeatMs` while the resolver runs, up to `maxLeaseMs` after the
 * claim began (`claimedAt`, before any wait for a duplicate; a hung resolver's lease then runs out,
 * and `stuck` lists it). The lease is known to be held until `leaseMs` after `leaseFrom`, when
 * the claim that took the key was sent, and then after each renewal was. It keeps renewing after
 * the request was aborted: the resolver is still running, and a lease left to run out would let
 * the client's retry take the key over and run the effects a second time. `stop` never waits
 * for a beat in flight (a statement on a dead connection could hang it).
 */
function startHeartbeat<T, Tx>(
  call: Call<T, Tx>,
  lease: LeaseOperations<Tx>,
  owner: LeaseOwner,
  claimedAt: number,
  leaseFrom: number,
  onLost: () => void,
): Heartbeat {
  const { heartbeatMs, leaseMs, maxLeaseMs, clock } = call;
  let heldUntil = leaseFrom + leaseMs;
  const surelyHeld = () => clock() < heldUntil - renewalMarginMs(leaseMs);
  if (heartbeatMs === undefined) {
    return {
      heldUntil: () => heldUntil,
      confirm: async () => surelyHeld(),
      stop: () => undefined,
      settled: async () => undefined,
    };
  }
  /** Renewals sent and not answered yet. */
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  const pastCap = () => clock() + leaseMs > claimedAt + maxLeaseMs;
  /** A renewal sent at `sentAt` answered: the lease runs on from then, or it was taken over. */
  const renewed = (sentAt: number, extended: boolean) => {
    if (extended) heldUntil = Math.max(heldUntil, sentAt + leaseMs);
    else {
      clearInterval(timer);
      onLost();
    }
  };
  const timer = setInterval(() => {
    if (stopped || pastCap()) {
      clearInterval(timer);
      return;
    }
    // Each beat on its own, never queued behind the last: one that hangs (a statement on a dead
    // connection) must not hold back the renewals after it while the lease runs out.
    // Two at most: renewals hung on dead connections must not take the whole pool.
    if (inFlight.size >= 2) return;
    const sentAt = clock();
    const beat = lease.extend(owner, leaseMs).then(
      (extended) => {
        if (!stopped) renewed(sentAt, extended);
      },
      // A missed beat: the next one tries again, and the completion is fenced in any case.
      () => undefined,
    );
    inFlight.add(beat);
    void beat.finally(() => inFlight.delete(beat));
  }, heartbeatMs);
  timer.unref();
  return {
    heldUntil: () => heldUntil,
    async confirm() {
      if (surelyHeld()) return true;
      if (stopped || pastCap()) return false;
      const sentAt = clock();
      let extended: boolean;
      try {
        extended = await lease.extend(owner, leaseMs);
      } catch {
        return false; // not lost, but not confirmed either
      }
      renewed(sentAt, extended);
      return extended;
    },
    stop() {
      stopped = true;
      clearInterval(timer);
    },
    async settled() {
      let bound: NodeJS.Timeout | undefined;
      const hung = new Promise<void>((resolve) => {
        bound = setTimeout(resolve, SETTLE_MS);
      });
      await Promise.race([Promise.all(inFlight), hung]).finally(() => clearTimeout(bound));
    },
  };
}
