import { afterEach, describe, expect, it, vi } from 'vitest';
import { RETRYABLE_CODES, retryDelay } from '../../src/client/retry-policy.js';
import {
  type IdempotencyEvent,
  IdempotencyKeyInProgressError,
  IdempotencyOutcomeUnknownError,
  IdempotencyStoreUnavailableError,
  memoryStore,
  type ResolverClaim,
  type RunIdempotentOptions,
  runIdempotent,
  type Store,
} from '../../src/index.js';
import { gate } from '../helpers/gate.js';

/** Time is faked: the heartbeat's timers, the core's clock and the memory store's clock move together. */
function fakeTime() {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance'] });
  return { storeClock: () => performance.timeOrigin + performance.now() };
}

/**
 * A memory store whose lease completions fail (the database is down) the first `failures` times;
 * `afterCommit`: each of those commits first, and only its answer is lost.
 */
function storeFailingCompletions(failures: number, clock: () => number, { afterCommit = false } = {}) {
  const base = memoryStore({ clock });
  let left = failures;
  let attempts = 0;
  const store: Store<undefined> = {
    ...base,
    lease: {
      ...base.lease,
      async complete(completion) {
        attempts++;
        const completed = afterCommit ? await base.lease.complete(completion) : undefined;
        if (left-- > 0) throw new IdempotencyStoreUnavailableError('the database is down');
        return completed ?? base.lease.complete(completion);
      },
    },
  };
  return { store, attempts: () => attempts };
}

function options(store: Store<undefined>, overrides: Partial<RunIdempotentOptions<undefined>> = {}) {
  const events: IdempotencyEvent[] = [];
  return {
    events,
    types: () => events.map((event) => event.type),
    options: {
      store,
      scope: 'user-1',
      key: 'charge-1',
      operation: 'payments.charge',
      input: { amount: 10 },
      mode: 'lease' as const,
      leaseMs: 10_000,
      onEvent: (event: IdempotencyEvent) => events.push(event),
      ...overrides,
    },
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('lease mode: storing the result after the effects happened', () => {
  it('retries a failed completion while the lease holds, and the call succeeds', async () => {
    const { storeClock } = fakeTime();
    const { store, attempts } = storeFailingCompletions(3, storeClock);
    const { options: call, types } = options(store);
    const gateway = vi.fn(async () => ({ charged: true }));
    const running = runIdempotent(call, gateway);
    await vi.advanceTimersByTimeAsync(2_000);
    await expect(running).resolves.toMatchObject({ value: { charged: true }, replayed: false });
    expect(attempts()).toBe(4);
    await expect(runIdempotent(call, gateway)).resolves.toMatchObject({ replayed: true });
    expect(gateway).toHaveBeenCalledTimes(1);
    expect(types()).toEqual(['claimed', 'completed', 'replayed']);
  });

  it('answers with its result when a completion committed but its answer was lost, found on the retry', async () => {
    const { storeClock } = fakeTime();
    const { store } = storeFailingCompletions(1, storeClock, { afterCommit: true });
    const { options: call, types } = options(store);
    const gateway = vi.fn(async () => ({ charged: true }));
    const running = runIdempotent(call, gateway);
    await vi.advanceTimersByTimeAsync(1_000);
    // Not a 409 saying another request took the key over: the record there is this call's.
    await expect(running).resolves.toMatchObject({ value: { charged: true }, replayed: false });
    expect(types()).toEqual(['claimed', 'completed']);
    await expect(runIdempotent(call, gateway)).resolves.toMatchObject({ replayed: true });
    expect(gateway).toHaveBeenCalledTimes(1);
  });

  it('answers IDEMPOTENCY_OUTCOME_UNKNOWN, which clients never retry by themselves, once the lease may have ended', async () => {
    const { storeClock } = fakeTime();
    const { store } = storeFailingCompletions(Number.POSITIVE_INFINITY, storeClock);
    const { options: call, types } = options(store);
    const gateway = vi.fn(async () => ({ charged: true }));
    const running = runIdempotent(call, gateway).catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(20_000);
    const error = await running;
    expect(error).toBeInstanceOf(IdempotencyOutcomeUnknownError);
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN', status: 500 });
    expect((error as Error).cause).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(types()).toEqual(['claimed', 'outcome_unknown']);
    // Not 503: a client that retried it would take the key over after the lease and charge again.
    expect(RETRYABLE_CODES.has('IDEMPOTENCY_OUTCOME_UNKNOWN')).toBe(false);
    expect(retryDelay({ kind: 'status', status: 500, idempotent: true }, 1)).toBeUndefined();
  });
});

/** Call A charges, then runs 8 s, past its 5 s lease: another request may take its key over meanwhile. */
function chargeOutlivingItsLease(overrides: Partial<RunIdempotentOptions<undefined>> = {}, runsMs = 8_000) {
  const { storeClock } = fakeTime();
  let charges = 0;
  const { options: call } = options(memoryStore({ clock: storeClock }), { leaseMs: 5_000, ...overrides });
  const slow = runIdempotent(call, async () => {
    charges++;
    await new Promise((resolve) => setTimeout(resolve, runsMs));
    return 'A';
  }).catch((error: unknown) => error);
  return { call, slow, charges: () => charges };
}

describe('lease mode: a completion that cannot say what happened', () => {
  it('answers IDEMPOTENCY_OUTCOME_UNKNOWN, not a retryable 409, when it was fenced and the key has since been freed', async () => {
    const { call, slow, charges } = chargeOutlivingItsLease();
    await vi.advanceTimersByTimeAsync(6_000); // A's lease ran out
    // B takes the key over, fails without a replayable error and frees the key.
    await runIdempotent(call, async () => {
      throw new Error('gateway 400');
    }).catch(() => undefined);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(await slow).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN', status: 500 });
    expect(charges()).toBe(1);
  });

  it('answers IDEMPOTENCY_OUTCOME_UNKNOWN, not a 409 whose retry gets a mismatch, when a call with another input took the key over', async () => {
    const { call, slow, charges } = chargeOutlivingItsLease();
    await vi.advanceTimersByTimeAsync(6_000); // A's lease ran out
    // B, the same key with another amount, takes the key over and stores its result.
    await expect(runIdempotent({ ...call, input: { amount: 20 } }, async () => 'B')).resolves.toMatchObject({
      value: 'B',
    });
    await vi.advanceTimersByTimeAsync(3_000);
    const error = await slow;
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN', status: 500 });
    expect((error as Error).message).toContain('a call with another input took the key over');
    expect(charges()).toBe(1);
  });

  it('answers IDEMPOTENCY_OUTCOME_UNKNOWN, not a 409, when the completed record of the call that took over has expired', async () => {
    // ttlMs no shorter than the lease (a shorter one is refused in lease mode); A runs 20 s.
    const { call, slow, charges } = chargeOutlivingItsLease({ ttlMs: 5_000 }, 20_000);
    await vi.advanceTimersByTimeAsync(6_000); // A's lease ran out
    // B takes the key over and stores its result, which expires five seconds later.
    await expect(runIdempotent(call, async () => 'B')).resolves.toMatchObject({ value: 'B' });
    await vi.advanceTimersByTimeAsync(15_000);
    // A 409 would be retried, and the retry, finding no live record, would run the charge again.
    expect(await slow).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN', status: 500 });
    expect(charges()).toBe(1);
  });

  it('answers at once, not at the end of the lease, when the completion fails for a reason that will not pass', async () => {
    const { storeClock } = fakeTime();
    const base = memoryStore({ clock: storeClock });
    const store: Store<undefined> = {
      ...base,
      lease: {
        ...base.lease,
        complete: async () => {
          throw new Error('Data too long for column result');
        },
      },
    };
    const { options: call } = options(store, { leaseMs: 60_000, heartbeatMs: 20_000 });
    let settled: unknown = 'pending';
    void runIdempotent(call, async () => 'charged').catch((error: unknown) => (settled = error));
    await vi.advanceTimersByTimeAsync(10);
    expect(settled).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' });
  });
});

/**
 * A memory store whose renewals (not the end of a lease, `extend(owner, 0)`) are slow: each waits
 * for `answerRenewals()`, or forever when it is never called (a dead connection).
 */
function storeWithSlowRenewals(clock: () => number) {
  const base = memoryStore({ clock });
  const slow = gate();
  const renewalsSent: number[] = [];
  const store: Store<undefined> = {
    ...base,
    lease: {
      ...base.lease,
      async extend(owner, leaseMs) {
        if (leaseMs > 0) {
          renewalsSent.push(performance.now());
          await slow.opened;
        }
        return base.lease.extend(owner, leaseMs);
      },
    },
  };
  return { store, renewalsSent, answerRenewals: slow.open };
}

/** A checkout that charges in a step, then fails 1.5 s later (a renewal is sent at 1 s): it keeps its steps. */
function failingAfterItsCharge() {
  let charges = 0;
  const resolver = async (_tx: unknown, { step }: ResolverClaim<undefined>) => {
    await step!('charge', () => ++charges);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    throw new Error('network blip');
  };
  const retry = async (_tx: unknown, { step }: ResolverClaim<undefined>) => step!('charge', () => ++charges);
  return { resolver, retry, charges: () => charges };
}

describe('lease mode: the heartbeat', () => {
  it('never holds the answer for a renewal that hangs', async () => {
    const { storeClock } = fakeTime();
    const base = memoryStore({ clock: storeClock });
    const store: Store<undefined> = {
      ...base,
      lease: { ...base.lease, extend: () => new Promise<boolean>(() => {}) }, // a dead connection
    };
    const { options: call } = options(store, { leaseMs: 3_000, heartbeatMs: 1_000 });
    let settled: unknown = 'pending';
    void runIdempotent(call, async () => {
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      return 'charged';
    }).then((result) => (settled = result.value));
    await vi.advanceTimersByTimeAsync(2_000);
    expect(settled).toBe('charged');
  });

  it('reports no fencing for a renewal that answers after the result was stored', async () => {
    const { storeClock } = fakeTime();
    const base = memoryStore({ clock: storeClock });
    const store: Store<undefined> = {
      ...base,
      lease: {
        ...base.lease,
        extend: async (owner, leaseMs) => {
          await new Promise((resolve) => setTimeout(resolve, 50));
          return base.lease.extend(owner, leaseMs);
        },
      },
    };
    const { options: call, types } = options(store, { leaseMs: 3_000, heartbeatMs: 1_000 });
    const running = runIdempotent(call, async () => {
      await new Promise((resolve) => setTimeout(resolve, 1_010)); // ends while a renewal is in flight
      return 'charged';
    });
    await vi.advanceTimersByTimeAsync(2_000);
    await expect(running).resolves.toMatchObject({ value: 'charged' });
    expect(types()).toEqual(['claimed', 'completed']);
  });

  it('ends the lease of a call that keeps its steps after the renewal in flight, so the retry resumes at once', async () => {
    const { storeClock } = fakeTime();
    const { store, answerRenewals } = storeWithSlowRenewals(storeClock);
    const { options: call } = options(store, { leaseMs: 5_000, heartbeatMs: 1_000 });
    const checkout = failingAfterItsCharge();
    const first = runIdempotent(call, checkout.resolver).catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(1_600); // failed while the renewal sent at 1 s is in flight
    answerRenewals();
    await vi.advanceTimersByTimeAsync(10);
    expect(await first).toMatchObject({ message: 'network blip' });
    await expect(runIdempotent({ ...call, waitTimeoutMs: 0 }, checkout.retry)).resolves.toMatchObject({
      value: 1,
      replayed: false,
    });
    expect(checkout.charges()).toBe(1);
  });

  it('never holds the answer of a call that ends its lease for a renewal that hangs', async () => {
    const { storeClock } = fakeTime();
    const { store } = storeWithSlowRenewals(storeClock); // the renewal never answers
    const { options: call } = options(store, { leaseMs: 5_000, heartbeatMs: 1_000 });
    let settled: unknown = 'pending';
    void runIdempotent(call, failingAfterItsCharge().resolver).catch((error: unknown) => (settled = error));
    await vi.advanceTimersByTimeAsync(1_500 + 1_000);
    expect(settled).toMatchObject({ message: 'network blip' });
    expect((await store.find('user-1', 'charge-1'))?.liveForMs).toBeLessThanOrEqual(0);
  });

  it('sends each renewal on time, not held back behind a slow one, and none once the call has answered', async () => {
    const { storeClock } = fakeTime();
    const { store, renewalsSent, answerRenewals } = storeWithSlowRenewals(storeClock);
    const { options: call } = options(store, { leaseMs: 5_000, heartbeatMs: 1_000 });
    const started = performance.now();
    const running = runIdempotent(call, async () => {
      await new Promise((resolve) => setTimeout(resolve, 2_500)); // renewals due at 1 s and 2 s
      return 'charged';
    });
    await vi.advanceTimersByTimeAsync(2_500);
    await expect(running).resolves.toMatchObject({ value: 'charged' });
    answerRenewals();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(renewalsSent.map((at) => at - started)).toEqual([1_000, 2_000]);
  });

  it('keeps two renewals in flight at most, so hung ones do not take the whole pool', async () => {
    const { storeClock } = fakeTime();
    const { store, renewalsSent } = storeWithSlowRenewals(storeClock); // renewals never answer
    const { options: call } = options(store, { leaseMs: 5_000, heartbeatMs: 1_000 });
    const running = runIdempotent(call, async () => {
      await new Promise((resolve) => setTimeout(resolve, 5_500)); // five beats due
      return 'charged';
    });
    await vi.advanceTimersByTimeAsync(5_500);
    await expect(running).resolves.toMatchObject({ value: 'charged' });
    expect(renewalsSent).toHaveLength(2);
  });

  it('keeps the lease while one renewal hangs: the renewals after it are sent and hold the key', async () => {
    const { storeClock } = fakeTime();
    const base = memoryStore({ clock: storeClock });
    let renewals = 0;
    const store: Store<undefined> = {
      ...base,
      lease: {
        ...base.lease,
        // The first renewal's connection died: it never answers. The ones after it work.
        extend: (owner, leaseMs) =>
          ++renewals === 1 ? new Promise<boolean>(() => {}) : base.lease.extend(owner, leaseMs),
      },
    };
    const { options: call } = options(store, { leaseMs: 3_000, heartbeatMs: 1_000 });
    let charges = 0;
    const slow = gate();
    const first = runIdempotent(call, async () => {
      charges++;
      await slow.opened; // a 10 s gateway call
      return 'first';
    });
    await vi.advanceTimersByTimeAsync(10_000);
    // A retry while the first call still runs: the key is still held.
    const retry = async () => {
      charges++;
      return 'second';
    };
    await expect(runIdempotent({ ...call, waitTimeoutMs: 0 }, retry)).rejects.toBeInstanceOf(
      IdempotencyKeyInProgressError,
    );
    slow.open();
    await expect(first).resolves.toMatchObject({ value: 'first', replayed: false });
    expect(charges).toBe(1);
  });

  it('stops renewing at maxLeaseMs, so a hung resolver’s key is freed', async () => {
    const { storeClock } = fakeTime();
    const store = memoryStore({ clock: storeClock });
    const hung = gate();
    const { options: call } = options(store, { leaseMs: 1_000, heartbeatMs: 300, maxLeaseMs: 3_000 });
    const first = runIdempotent(call, () => hung.opened.then(() => 'late'));
    await vi.advanceTimersByTimeAsync(2_500);
    await expect(runIdempotent({ ...call, waitTimeoutMs: 0 }, async () => 'retry')).rejects.toBeInstanceOf(
      IdempotencyKeyInProgressError,
    );
    await vi.advanceTimersByTimeAsync(2_000); // past maxLeaseMs, and the last renewal's lease
    await expect(runIdempotent(call, async () => 'retry')).resolves.toMatchObject({ value: 'retry' });
    hung.open();
    await expect(first).rejects.toBeInstanceOf(IdempotencyKeyInProgressError); // fenced
  });

  it('keeps renewing a long resolver’s lease below maxLeaseMs', async () => {
    const { storeClock } = fakeTime();
    const store = memoryStore({ clock: storeClock });
    const slow = gate();
    const { options: call } = options(store, { leaseMs: 1_000, heartbeatMs: 300, maxLeaseMs: 60_000 });
    const first = runIdempotent(call, () => slow.opened.then(() => 'done'));
    await vi.advanceTimersByTimeAsync(30_000);
    await expect(runIdempotent({ ...call, waitTimeoutMs: 0 }, async () => 'retry')).rejects.toBeInstanceOf(
      IdempotencyKeyInProgressError,
    );
    slow.open();
    await expect(first).resolves.toMatchObject({ value: 'done', replayed: false });
  });

  it('refuses a maxLeaseMs shorter than the lease', async () => {
    const { options: call } = options(memoryStore(), { leaseMs: 1_000, maxLeaseMs: 500 });
    await expect(runIdempotent(call, async () => 1)).rejects.toThrow(/maxLeaseMs/);
  });
});
