import { describe, expect, it, vi } from 'vitest';
import {
  fingerprint,
  type IdempotencyEvent,
  IdempotencyKeyInProgressError,
  IdempotencyLeaseLostError,
  IdempotencyResultTooLargeError,
  IdempotencyStoreUnavailableError,
  memoryStore,
  type ResolverClaim,
  runIdempotent,
  type Store,
} from '../../src/index.js';
import { type MovableClock, movableClock } from '../helpers/clock.js';
import { gate } from '../helpers/gate.js';
import { storedRecord } from '../helpers/stored-record.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A promise and the function that settles it, to hold a resolver at a chosen point. */

function leased(overrides: { leaseMs?: number; heartbeatMs?: number } = {}) {
  const events: IdempotencyEvent[] = [];
  const clock = movableClock();
  const options = {
    store: memoryStore({ clock: clock.now }),
    scope: 'user-1',
    key: 'k-1',
    operation: 'emails.send',
    input: { to: 'a@example.com' },
    mode: 'lease' as const,
    leaseMs: 5_000,
    onEvent: (event: IdempotencyEvent) => events.push(event),
    ...overrides,
  };
  const types = () => events.map((e) => e.type);
  return { options, events, types, clock };
}

/** Moves the store's clock past the lease and takes the key over with another owner token. */
async function takeOverLater(store: Store, clock: MovableClock, ownerToken: string, afterMs: number) {
  clock.advance(afterMs);
  return store.lease.claim({
    scope: 'user-1',
    key: 'k-1',
    operation: 'emails.send',
    fingerprint: (await store.find('user-1', 'k-1'))!.fingerprint,
    ttlMs: 60_000,
    ownerToken,
    leaseMs: 60_000,
  });
}

describe('runIdempotent in lease mode (memory store)', () => {
  it('commits the claim before the resolver runs, then stores and replays the result', async () => {
    const { options, types } = leased();
    const seen: unknown[] = [];
    const resolver = vi.fn(async () => {
      seen.push(await options.store.find('user-1', 'k-1'));
      return { sent: true, at: new Date(1) };
    });
    const first = await runIdempotent(options, resolver);
    const second = await runIdempotent(options, resolver);
    expect(resolver).toHaveBeenCalledTimes(1);
    expect(seen[0]).toMatchObject({
      status: 'IN_PROGRESS',
      ownerToken: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    expect(first).toMatchObject({ replayed: false });
    expect(second).toMatchObject({ replayed: true, value: { sent: true, at: new Date(1) } });
    expect(await options.store.find('user-1', 'k-1')).toMatchObject({
      status: 'COMPLETED',
      lockedUntil: null,
    });
    expect(types()).toEqual(['claimed', 'completed', 'replayed']);
  });

  it('hands the resolver the store’s plain client (undefined for the memory store)', async () => {
    const { options } = leased();
    const resolver = vi.fn(async () => 'ok');
    await runIdempotent(options, resolver);
    expect(resolver).toHaveBeenCalledWith(
      undefined,
      expect.objectContaining({ key: 'k-1', scope: 'user-1' }),
    );
  });

  it('answers a duplicate with IN_PROGRESS once its wait is over, hinting the rest of the lease', async () => {
    const { options, types } = leased({ leaseMs: 4_000 });
    const held = gate();
    const first = runIdempotent(options, () => held.opened.then(() => 'done'));
    await sleep(10);
    const duplicate = vi.fn(async () => 'duplicate');
    const error = await runIdempotent({ ...options, waitTimeoutMs: 30 }, duplicate).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyInProgressError);
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_KEY_IN_PROGRESS', status: 409 });
    const { retryAfterMs } = error as IdempotencyKeyInProgressError;
    expect(retryAfterMs).toBeGreaterThan(3_000);
    expect(retryAfterMs).toBeLessThanOrEqual(4_000);
    expect(duplicate).not.toHaveBeenCalled();
    held.open();
    await expect(first).resolves.toMatchObject({ value: 'done', replayed: false });
    expect(types()).toEqual(['claimed', 'in_progress', 'completed']);
  });

  it('runs one of 20 concurrent duplicates; the other 19 wait for it and replay its result', async () => {
    const { options, types } = leased();
    const held = gate();
    const resolver = vi.fn(() => held.opened.then(() => 'sent'));
    const calls = Array.from({ length: 20 }, () => runIdempotent(options, resolver));
    await sleep(50);
    held.open();
    const outcomes = await Promise.all(calls);
    expect(resolver).toHaveBeenCalledTimes(1);
    expect(outcomes.map((o) => o.value)).toEqual(Array(20).fill('sent'));
    expect(outcomes.filter((o) => o.replayed)).toHaveLength(19);
    expect(types().filter((t) => t === 'in_progress')).toEqual([]);
  });

  it('notices the completion soon: a waiting duplicate answers at most half its wait after it', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    try {
      const inner = memoryStore();
      let reads = 0;
      const store: Store = Object.assign(Object.create(inner) as Store, {
        find: (scope: string, key: string) => {
          reads++;
          return inner.find(scope, key);
        },
      });
      const options = { ...leased().options, store, leaseMs: 30_000, clock: () => Date.now() };
      let finishedAt = 0;
      const first = runIdempotent(options, async () => {
        await sleep(1_000);
        finishedAt = Date.now();
        return 'done';
      });
      await vi.advanceTimersByTimeAsync(10);
      const arrivedAt = Date.now();
      reads = 0;
      const duplicate = runIdempotent(options, async () => 'dup').then((result) => ({
        result,
        at: Date.now(),
      }));
      await vi.advanceTimersByTimeAsync(5_000);
      const { result, at } = await duplicate;
      await first;
      expect(result).toMatchObject({ value: 'done', replayed: true });
      expect(at - finishedAt).toBeLessThanOrEqual((finishedAt - arrivedAt) / 2 + 5);
      expect(reads).toBeLessThanOrEqual(16); // about log1.5(1000 / 5) reads, not one per few ms
    } finally {
      vi.useRealTimers();
    }
  });

  it('lets a request take over a lease that ran out, and fences the old owner’s late completion', async () => {
    const { options, types, events, clock } = leased({ leaseMs: 60 });
    const held = gate();
    const old = runIdempotent(options, () => held.opened.then(() => 'old owner'));
    await sleep(10);
    clock.advance(120); // the store's clock: the lease has run out
    const takeover = await runIdempotent(options, async () => 'new owner');
    held.open();
    const error = await old.catch((e: unknown) => e);
    expect(takeover).toMatchObject({ value: 'new owner', replayed: false });
    expect(error).toBeInstanceOf(IdempotencyLeaseLostError);
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_KEY_IN_PROGRESS', status: 409 });
    expect(await runIdempotent(options, async () => 'third')).toMatchObject({
      value: 'new owner',
      replayed: true,
    });
    expect(types()).toEqual(['claimed', 'expired_takeover', 'completed', 'fenced', 'replayed']);
    expect(events.every((e) => e.mode === 'lease')).toBe(true);
  });

  it('never lets an old owner’s release delete the claim of the request that took over', async () => {
    const { options, types, clock } = leased();
    const held = gate();
    const old = runIdempotent(options, async () => {
      await held.opened;
      throw new Error('gateway timeout');
    });
    await sleep(10);
    expect(await takeOverLater(options.store, clock, 'b'.repeat(64), 10_000)).toMatchObject({
      claimed: true,
      tookOver: true,
    });
    held.open();
    await expect(old).rejects.toThrow('gateway timeout');
    expect(await options.store.find('user-1', 'k-1')).toMatchObject({
      status: 'IN_PROGRESS',
      ownerToken: 'b'.repeat(64),
    });
    expect(types()).toEqual(['claimed', 'fenced']);
  });

  it('releases its own claim when the resolver throws, so a retry runs', async () => {
    const { options, types } = leased();
    const resolver = vi
      .fn<() => Promise<string>>()
      .mockRejectedValueOnce(new Error('smtp down'))
      .mockResolvedValueOnce('sent');
    await expect(runIdempotent(options, resolver)).rejects.toThrow('smtp down');
    expect(await options.store.find('user-1', 'k-1')).toBeNull();
    await expect(runIdempotent(options, resolver)).resolves.toMatchObject({ value: 'sent', replayed: false });
    expect(resolver).toHaveBeenCalledTimes(2);
    expect(types()).toEqual(['claimed', 'released', 'claimed', 'completed']);
  });

  it('stores and replays errors that replayErrors accepts', async () => {
    const { options } = leased();
    const resolver = vi.fn(async () => {
      throw Object.assign(new Error('declined'), { code: 'CARD_DECLINED' });
    });
    const replayErrors = (e: unknown) => (e as { code?: string }).code === 'CARD_DECLINED';
    await expect(runIdempotent({ ...options, replayErrors }, resolver)).rejects.toThrow('declined');
    await expect(runIdempotent({ ...options, replayErrors }, resolver)).rejects.toMatchObject({
      message: 'declined',
      code: 'CARD_DECLINED',
    });
    expect(resolver).toHaveBeenCalledTimes(1);
  });

  // At 10 bytes the error's own stored text is larger than the limit: it is kept all the same.
  it.each([500, 10])(
    'keeps a result over maxResultBytes (%i) as its error, so the effects never run again',
    async (maxResultBytes) => {
      const { options, types } = leased();
      const resolver = vi.fn(async () => 'x'.repeat(1_000));
      await expect(runIdempotent({ ...options, maxResultBytes }, resolver)).rejects.toBeInstanceOf(
        IdempotencyResultTooLargeError,
      );
      await expect(runIdempotent({ ...options, maxResultBytes }, resolver)).rejects.toMatchObject({
        name: 'IdempotencyResultTooLargeError',
      });
      expect(resolver).toHaveBeenCalledTimes(1);
      expect(types()).toEqual(['claimed', 'completed', 'replayed']);
    },
  );

  it('answers IDEMPOTENCY_OUTCOME_UNKNOWN when a step ran but its record could not be stored, and keeps the claim', async () => {
    const { options, types } = leased();
    const base = options.store;
    const store: Store = {
      ...base,
      steps: {
        ...base.steps!,
        save: async () => {
          throw new IdempotencyStoreUnavailableError('the database is down');
        },
      },
    };
    let charges = 0;
    const error = await runIdempotent({ ...options, store }, async (_tx, { step }) =>
      step!('charge', () => ++charges),
    ).catch((e: unknown) => e);
    // Not the store's 503, which a client would retry: the charge happened.
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN', status: 500 });
    expect(charges).toBe(1);
    // Its lease ends ('released'), but the claim stays, so a retry resumes rather than starting afresh.
    expect(types()).toEqual(['claimed', 'outcome_unknown', 'released']);
    expect(await base.find('user-1', 'k-1')).toMatchObject({ status: 'IN_PROGRESS' });
  });

  it('reports no takeover (`fenced`) when a step is refused because its renewal found the store down', async () => {
    const { options, types, clock } = leased({ heartbeatMs: 1_000 });
    const base = options.store;
    let down = false;
    const unavailable = () => {
      throw new IdempotencyStoreUnavailableError('the database is down');
    };
    const store: Store = {
      ...base,
      find: async (scope, key) => (down ? unavailable() : base.find(scope, key)),
      lease: {
        ...base.lease,
        extend: async (owner, ms) => (down ? unavailable() : base.lease.extend(owner, ms)),
      },
    };
    let charges = 0;
    const error = await runIdempotent({ ...options, store, clock: clock.now }, async (_tx, { step }) => {
      // Within the renewal margin of the lease's end: the step first renews, and the store is down.
      clock.advance(4_600);
      down = true;
      return step!('charge', () => ++charges);
    }).catch((e: unknown) => e);
    expect(charges).toBe(0);
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' });
    expect((error as Error).message).toMatch(/could not be renewed before its next step/);
    // Nobody took the key over: no `fenced`, and the call's own claim is released.
    expect(types()).toEqual(['claimed', 'outcome_unknown', 'released']);
  });

  it('reports no takeover (`fenced`) when a step refused for its lease finds the key’s record gone', async () => {
    const { options, types, clock } = leased();
    const base = options.store;
    let gone = false;
    const store: Store = { ...base, find: async (scope, key) => (gone ? null : base.find(scope, key)) };
    const error = await runIdempotent({ ...options, store, clock: clock.now }, async (_tx, { step }) => {
      clock.advance(4_900); // within the margin of the lease's end, and nothing renews it
      gone = true; // its record expired and was swept, as the call's read finds
      return step!('charge', () => 'charged');
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' });
    expect(types()).toEqual(['claimed', 'outcome_unknown', 'released']);
  });

  it('answers OUTCOME_UNKNOWN, not its replayable error, when its fenced completion cannot read who holds the key', async () => {
    const { options, clock } = leased();
    const base = options.store;
    let readFails = false;
    const store: Store = {
      ...base,
      find: async (scope, key) => {
        if (readFails) throw new IdempotencyStoreUnavailableError('the connection was killed');
        return base.find(scope, key);
      },
    };
    const call = {
      ...options,
      store,
      clock: clock.now,
      replayErrors: (error: unknown) => (error as { code?: string }).code === 'DECLINED',
    };
    const tookOver = gate();
    const mayFinish = gate();
    const first = runIdempotent(call, async () => {
      await tookOver.opened; // its lease ran out, and a retry took the key over
      readFails = true;
      throw Object.assign(new Error('declined'), { code: 'DECLINED' });
    }).catch((error: unknown) => error);
    await expect.poll(async () => (await base.find('user-1', 'k-1'))?.status).toBe('IN_PROGRESS');
    clock.advance(6_000);
    const retry = runIdempotent({ ...call, firstAttempt: true }, async () => {
      tookOver.open();
      await mayFinish.opened;
      return 'charged';
    });
    // The key will replay the retry's success: "declined" would be an answer it contradicts.
    expect(await first).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' });
    readFails = false;
    mayFinish.open();
    expect((await retry).value).toBe('charged');
  });

  it('keeps no step called wrongly as the key’s outcome, though the resolver wraps its error', async () => {
    const { options } = leased();
    const charge = vi.fn(() => 'ch_1');
    await expect(
      runIdempotent({ ...options, replayErrors: () => true }, async (_tx, { step }) => {
        try {
          return await step!('checkout', () => step!('charge', charge));
        } catch (cause) {
          throw new Error('checkout failed', { cause });
        }
      }),
    ).rejects.toThrow('checkout failed');
    expect(await options.store.find('user-1', 'k-1')).toBeNull();
    expect(charge).not.toHaveBeenCalled();
  });

  it('keeps the claim of a resolver that fails while a step still runs beside it, so the retry resumes', async () => {
    const { options, types, clock } = leased();
    let charges = 0;
    let attempts = 0;
    const resolver = async (_tx: unknown, { step }: ResolverClaim<undefined>) => {
      attempts++;
      // One step at a time, beside other work that fails on the first attempt (a stock service's 503).
      const [charge] = await Promise.all([
        step!('charge', async () => {
          await sleep(20); // the gateway call
          return ++charges;
        }),
        attempts === 1 ? Promise.reject(new Error('stock service unavailable')) : Promise.resolve(),
      ]);
      return charge;
    };
    await expect(runIdempotent(options, resolver)).rejects.toThrow('stock service unavailable');
    // Answered at once; the claim stays (not released: a retry would charge on a freed key) and the
    // charge, still running, stores its result under it.
    expect(await options.store.find('user-1', 'k-1')).toMatchObject({ status: 'IN_PROGRESS' });
    await sleep(50);
    clock.advance(6_000); // the lease ran out by itself
    await expect(runIdempotent(options, resolver)).resolves.toMatchObject({ value: 1, replayed: false });
    expect(charges).toBe(1);
    expect(types()).toEqual(['claimed', 'expired_takeover', 'completed']);
  });

  it('answers a resolver that gives up on a step that never ends, rather than waiting for it', async () => {
    const { options } = leased();
    const call = runIdempotent(options, async (_tx, { step }) =>
      Promise.race([
        step!('charge', () => new Promise<never>(() => {})), // the gateway never answers
        sleep(20).then(() => Promise.reject(new Error('gateway timeout'))),
      ]),
    );
    await expect(call).rejects.toThrow('gateway timeout');
    expect(await options.store.find('user-1', 'k-1')).toMatchObject({ status: 'IN_PROGRESS' });
  });

  it('keeps a long resolver’s lease alive with a heartbeat', async () => {
    const { options, types } = leased({ leaseMs: 300, heartbeatMs: 50 });
    const resolver = vi.fn(async () => {
      await sleep(900);
      return 'slow';
    });
    const first = runIdempotent(options, resolver);
    await sleep(600); // twice the lease
    await expect(runIdempotent({ ...options, waitTimeoutMs: 0 }, resolver)).rejects.toBeInstanceOf(
      IdempotencyKeyInProgressError,
    );
    await expect(first).resolves.toMatchObject({ value: 'slow', replayed: false });
    expect(resolver).toHaveBeenCalledTimes(1);
    expect(types()).toEqual(['claimed', 'in_progress', 'completed']);
  });

  it('reports a lease the heartbeat finds taken over once, and fences the completion', async () => {
    const { options, types, clock } = leased({ leaseMs: 1_000, heartbeatMs: 20 });
    const held = gate();
    const old = runIdempotent(options, () => held.opened.then(() => 'old'));
    await sleep(10);
    await takeOverLater(options.store, clock, 'c'.repeat(64), 10_000);
    await sleep(60);
    held.open();
    await expect(old).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
    expect(types()).toEqual(['claimed', 'fenced']);
  });

  it('makes a transactional request on a leased key answer IN_PROGRESS', async () => {
    const { options } = leased();
    const held = gate();
    const first = runIdempotent(options, () => held.opened.then(() => 1));
    await sleep(10);
    const { mode: _lease, ...transactional } = options;
    await expect(runIdempotent({ ...transactional, waitTimeoutMs: 1 }, async () => 2)).rejects.toBeInstanceOf(
      IdempotencyKeyInProgressError,
    );
    held.open();
    await first;
  });

  it('runs in lease mode when the store defaults to it, unless the call names another mode', async () => {
    const store = memoryStore({ mode: 'lease', leaseMs: 2_000 });
    const events: IdempotencyEvent[] = [];
    const options = {
      store,
      scope: 'user-1',
      key: 'k-1',
      operation: 'op',
      input: {},
      onEvent: (e: IdempotencyEvent) => events.push(e),
    };
    const held = gate();
    const first = runIdempotent(options, () => held.opened.then(() => 1));
    await sleep(10);
    const error = await runIdempotent({ ...options, waitTimeoutMs: 0 }, async () => 2).catch(
      (e: unknown) => e,
    );
    expect((error as IdempotencyKeyInProgressError).retryAfterMs).toBeLessThanOrEqual(2_000);
    expect((await store.find('user-1', 'k-1'))!.lockedUntil).not.toBeNull();
    held.open();
    await first;
    await runIdempotent({ ...options, key: 'k-2', mode: 'transactional' }, async () => 3);
    expect(events.map((e) => `${e.type}:${e.mode}`)).toEqual([
      'claimed:lease',
      'in_progress:lease',
      'completed:lease',
      'claimed:transactional',
      'completed:transactional',
    ]);
  });

  it('never replays a record that keeps expiring under its claims: answers IN_PROGRESS instead', async () => {
    const { options, types } = leased();
    const store = options.store;
    const expired = storedRecord({
      operation: 'emails.send',
      fingerprint: fingerprint('emails.send', { to: 'a@example.com' }),
      result: store.serializer ? store.serializer.serialize('stale') : '{"json":"stale"}',
      liveForMs: -1,
    });
    // A store whose every claim loses the race to a record that has expired by the time it is read.
    const racing: Store = {
      ...store,
      lease: { ...store.lease!, claim: async () => ({ claimed: false, existing: expired }) },
    };
    const resolver = vi.fn(async () => 'fresh');
    const error = await runIdempotent({ ...options, store: racing }, resolver).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyInProgressError);
    expect(resolver).not.toHaveBeenCalled();
    expect(types()).toEqual(['in_progress']);
  });

  it('rejects transactional mode on a store without transactions, and a heartbeat no shorter than the lease', async () => {
    const { options } = leased();
    const { transaction: _none, ...leaseOnly } = memoryStore();
    await expect(
      runIdempotent({ ...options, mode: 'transactional', store: leaseOnly }, async () => 1),
    ).rejects.toThrow(/no transactions/);
    await expect(
      runIdempotent({ ...options, leaseMs: 100, heartbeatMs: 100 }, async () => 1),
    ).rejects.toThrow(RangeError);
    // Past what Node's timers hold, the heartbeat would beat every millisecond; a fraction is no beat.
    const days = (n: number) => n * 86_400_000;
    for (const heartbeatMs of [days(30), 0.5]) {
      await expect(
        runIdempotent({ ...options, leaseMs: days(90), maxLeaseMs: days(3650), heartbeatMs }, async () => 1),
      ).rejects.toThrow(/heartbeatMs must be an integer from 1 to 2147483647/);
    }
  });

  it('rejects a waitTimeoutMs no timer keeps, and 0 in transactional mode, where it also bounds the claim', async () => {
    const { options } = leased();
    const resolver = vi.fn(async () => 1);
    for (const waitTimeoutMs of [Number.NaN, -1, 1.5, Number.POSITIVE_INFINITY, 2 ** 31]) {
      await expect(runIdempotent({ ...options, waitTimeoutMs }, resolver)).rejects.toThrow(
        /waitTimeoutMs must be an integer from 0 to 2147483647/,
      );
    }
    const { mode: _lease, ...transactional } = options;
    await expect(runIdempotent({ ...transactional, waitTimeoutMs: 0 }, resolver)).rejects.toThrow(
      /waitTimeoutMs must be positive in transactional mode/,
    );
    expect(resolver).not.toHaveBeenCalled();
    // Lease mode: 0 answers a duplicate at once, and a free key runs.
    await expect(runIdempotent({ ...options, waitTimeoutMs: 0 }, resolver)).resolves.toMatchObject({
      value: 1,
    });
  });

  it('refuses steps under a ttlMs no longer than the call may hold its key, at the first step, before its fn runs', async () => {
    // Steps expire with their record, ttlMs after the claim: a call held that long by its heartbeat
    // that then failed would find them expired on its retry, and charge again.
    const { options } = leased();
    const fn = vi.fn(() => 'charged');
    const withStep = async (_tx: unknown, { step }: ResolverClaim<undefined>) => step!('charge', fn);
    await expect(runIdempotent({ ...options, ttlMs: 8_000, heartbeatMs: 1_000 }, withStep)).rejects.toThrow(
      /ttlMs \(8000\) is not longer than the longest this call may hold its key \(maxLeaseMs, 300000, with heartbeatMs\)/,
    );
    await expect(runIdempotent({ ...options, key: 'k-2', ttlMs: 4_000 }, withStep)).rejects.toThrow(
      /\(leaseMs, 5000\)/,
    );
    // As long as the lease, no longer: the record (and its steps) would expire as the lease ends, so
    // no retry could ever resume them.
    await expect(runIdempotent({ ...options, key: 'k-5', ttlMs: 5_000 }, withStep)).rejects.toThrow(
      /ttlMs \(5000\) is not longer than the longest this call may hold its key \(leaseMs, 5000\)/,
    );
    expect(fn).not.toHaveBeenCalled();
    // A call that runs no step is not concerned; one held for less than its ttlMs runs its steps.
    await expect(
      runIdempotent({ ...options, key: 'k-3', ttlMs: 8_000, heartbeatMs: 1_000 }, async () => 1),
    ).resolves.toMatchObject({ value: 1 });
    await expect(
      runIdempotent(
        { ...options, key: 'k-4', ttlMs: 8_000, heartbeatMs: 1_000, maxLeaseMs: 7_999 },
        withStep,
      ),
    ).resolves.toMatchObject({ value: 'charged' });
  });
});
