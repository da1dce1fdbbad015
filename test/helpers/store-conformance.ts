import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MAX_DURATION_MS } from '../../src/core/run-idempotent.js';
import {
  type IdempotencyEvent,
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  IdempotencyLeaseLostError,
  IdempotencyStepDivergedError,
  IdempotencyStoreUnavailableError,
  type LeaseOwner,
  type ResolverClaim,
  type RunIdempotentOptions,
  runIdempotent,
  type Step,
  type Store,
  stepKey,
} from '../../src/index.js';
import { countingReads } from './counting-reads.js';
import { uniqueScope } from './databases.js';
import { gate } from './gate.js';

/** What the conformance suite needs of a store under test. */
export interface ConformanceTarget {
  /** The store; every test works in a scope of its own. */
  store: () => Store<unknown>;
  /**
   * Moves the store's clock `ms` forward for the records of `scope`, as time passing would (the
   * memory store's injected clock, or a database's records shifted back by `ms`). Never a sleep.
   */
  travel: (scope: string, ms: number) => Promise<void>;
}

type Mode = 'transactional' | 'lease';

/**
 * The store contract, specified once and run on every store (`memoryStore`, `prismaStore` on
 * SQLite, PostgreSQL and MariaDB, and any store a user writes): every row of the outcome table in
 * both modes, concurrent duplicates, takeover, fencing, and expiry by the store's own clock.
 * A bug fixed in any store becomes a case here.
 */
export function runStoreConformance(
  title: string,
  target: () => ConformanceTarget,
  /**
   * `savepoints: false` for a store whose transactions take none (`TransactionSession.savepoint`):
   * a replayable error is then kept after the rollback, and the case that needs it is skipped.
   */
  { savepoints = true }: { savepoints?: boolean } = {},
): void {
  describe(`store contract: ${title}`, () => {
    afterEach(() => {
      vi.useRealTimers();
    });

    const call = (scope: string, mode: Mode, overrides: Partial<RunIdempotentOptions> = {}) => {
      const events: IdempotencyEvent[] = [];
      const options: RunIdempotentOptions = {
        store: target().store(),
        scope,
        key: 'k-1',
        operation: 'payments.create',
        input: { amount: 10 },
        mode,
        leaseMs: 30_000,
        onEvent: (event) => events.push(event),
        ...overrides,
      };
      return { options, events, types: () => events.map((e) => e.type) };
    };

    /**
     * The store as another server sees it: the same records, but no in-process single flight
     * shared with this one, so concurrent duplicates meet in the store itself.
     */
    const onAnotherServer = (store: Store<unknown>): Store<unknown> =>
      Object.assign(Object.create(store) as Store<unknown>, { backend: {} });

    /** The store-level claim of key `k` by owner `a…`. */
    const leaseRequest = (scope: string, leaseMs: number) => ({
      scope,
      key: 'k',
      operation: 'op',
      fingerprint: 'f'.repeat(64),
      ttlMs: 60_000,
      ownerToken: 'a'.repeat(64),
      leaseMs,
    });

    /** Moves the process's own clock (`Date`) as a server whose clock is off would have it. */
    const skewProcessClock = (ms: number) => {
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(Date.now() + ms);
    };

    describe.each<Mode>(['transactional', 'lease'])('%s mode', (mode) => {
      it('runs an unseen key once and replays the stored result to every retry', async () => {
        const { options, types } = call(uniqueScope(), mode);
        const resolver = vi.fn(async () => ({ id: 1, at: new Date(5), big: 7n }));
        const first = await runIdempotent(options, resolver);
        const second = await runIdempotent(options, resolver);
        expect(resolver).toHaveBeenCalledTimes(1);
        expect(first.replayed).toBe(false);
        expect(second).toMatchObject({ replayed: true, value: { id: 1, at: new Date(5), big: 7n } });
        expect(second.record).toEqual(first.record); // the times the store keeps, both times
        expect(types()).toEqual(['claimed', 'completed', 'replayed']);
      });

      it('hands out times of its own: a caller that changes them changes no record and no later answer', async () => {
        const { options } = call(uniqueScope(), mode);
        const resolver = vi.fn(async (_tx: unknown, claim: ResolverClaim<unknown>) => {
          claim.firstSeenAt.setTime(0);
          return 1;
        });
        const first = await runIdempotent(options, resolver);
        const times = (record: typeof first.record) =>
          [record.firstSeenAt, record.completedAt, record.expiresAt].map((date) => date.getTime());
        const kept = times(first.record);
        expect(kept[0]).toBeGreaterThan(0);
        const clear = (record: typeof first.record) => {
          for (const date of [record.firstSeenAt, record.completedAt, record.expiresAt]) date.setTime(0);
        };
        clear(first.record); // an expiresAt of 1970 in the store would run the resolver again
        const second = await runIdempotent(options, resolver);
        clear(second.record);
        const third = await runIdempotent(options, resolver);
        expect(resolver).toHaveBeenCalledTimes(1);
        expect([second.replayed, third.replayed]).toEqual([true, true]);
        expect(times(third.record)).toEqual(kept);
        const { scope, key } = first.record;
        const found = await options.store.find(scope, key);
        found?.expiresAt.setTime(0);
        expect((await options.store.find(scope, key))?.expiresAt.getTime()).toBe(kept[2]);
      });

      it('replays a completed record to a call hinted as a first attempt, without reading it first', async () => {
        const { options, types } = call(uniqueScope(), mode);
        const resolver = vi.fn(async () => ({ id: 1, at: new Date(5) }));
        const first = await runIdempotent(options, resolver);
        const { store, reads } = countingReads(options.store);
        const hinted = await runIdempotent({ ...options, store, firstAttempt: true }, resolver);
        expect(resolver).toHaveBeenCalledTimes(1);
        expect(hinted).toMatchObject({ replayed: true, value: { id: 1, at: new Date(5) } });
        expect(hinted.record).toEqual(first.record);
        expect(reads.count).toBe(0); // answered by the claim (or from a local cache)
        await expect(
          runIdempotent({ ...options, store, input: { amount: 99 }, firstAttempt: true }, resolver),
        ).rejects.toBeInstanceOf(IdempotencyKeyMismatchError);
        expect(types()).toEqual(['claimed', 'completed', 'replayed', 'mismatch']);
      });

      it('runs duplicates hinted as first attempts once while the first runs, on this server and another', async () => {
        const { options } = call(uniqueScope(), mode, { firstAttempt: true });
        const held = gate();
        const started = gate();
        const first = countingReads(options.store);
        const running = runIdempotent({ ...options, store: first.store }, async () => {
          started.open();
          await held.opened;
          return { token: randomBytes(8).toString('hex') };
        });
        await started.opened;
        const duplicate = vi.fn(async () => ({ token: 'twice' }));
        const duplicates = [
          runIdempotent(options, duplicate),
          runIdempotent({ ...options, store: onAnotherServer(options.store) }, duplicate),
        ];
        setTimeout(held.open, 50);
        const results = await Promise.all([running, ...duplicates]);
        expect(duplicate).not.toHaveBeenCalled();
        expect(results.map((r) => r.replayed)).toEqual([false, true, true]);
        expect(new Set(results.map((r) => r.value.token)).size).toBe(1);
        expect(first.reads.count).toBe(0); // the first call claimed without reading
      });

      it('answers the same key with another input as a mismatch and leaves the record as it was', async () => {
        const { options, types } = call(uniqueScope(), mode);
        await runIdempotent(options, async () => 'first');
        const store = options.store;
        const { liveForMs: _, ...before } = (await store.find(options.scope as string, 'k-1'))!;
        const resolver = vi.fn(async () => 'second');
        await expect(runIdempotent({ ...options, input: { amount: 99 } }, resolver)).rejects.toBeInstanceOf(
          IdempotencyKeyMismatchError,
        );
        await expect(
          runIdempotent({ ...options, operation: 'payments.refund' }, resolver),
        ).rejects.toBeInstanceOf(IdempotencyKeyMismatchError);
        expect(resolver).not.toHaveBeenCalled();
        const { liveForMs: __, ...after } = (await store.find(options.scope as string, 'k-1'))!;
        expect(after).toEqual(before);
        expect(types()).toEqual(['claimed', 'completed', 'mismatch', 'mismatch']);
      });

      it('keeps nothing when the resolver throws, so the key can be retried', async () => {
        const { options } = call(uniqueScope(), mode);
        const resolver = vi.fn<() => Promise<string>>().mockRejectedValueOnce(new Error('boom'));
        resolver.mockResolvedValueOnce('ok');
        await expect(runIdempotent(options, resolver)).rejects.toThrow('boom');
        expect(await options.store.find(options.scope as string, 'k-1')).toBeNull();
        await expect(runIdempotent(options, resolver)).resolves.toMatchObject({
          value: 'ok',
          replayed: false,
        });
        expect(resolver).toHaveBeenCalledTimes(2);
      });

      it('stores and replays the errors replayErrors accepts', async () => {
        const declined = Object.assign(new Error('declined'), { code: 'CARD_DECLINED' });
        const replayErrors = (error: unknown) => (error as { code?: string }).code === 'CARD_DECLINED';
        const { options } = call(uniqueScope(), mode, { replayErrors });
        const resolver = vi.fn(async () => {
          throw declined;
        });
        await expect(runIdempotent(options, resolver)).rejects.toBe(declined);
        await expect(runIdempotent(options, resolver)).rejects.toMatchObject({
          message: 'declined',
          code: 'CARD_DECLINED',
        });
        expect(resolver).toHaveBeenCalledTimes(1);
      });

      it('stores a replayable error over a record that expired, and replays it', async () => {
        const scope = uniqueScope();
        const replayErrors = (error: unknown) => (error as Error).message === 'card declined';
        const { options } = call(scope, mode, { ttlMs: 60_000, replayErrors });
        await runIdempotent(options, async () => 'long ago');
        await target().travel(scope, 61_000);
        const reused = { ...options, input: { amount: 2 } };
        const declined = vi.fn(async () => {
          throw new Error('card declined');
        });
        await expect(runIdempotent(reused, declined)).rejects.toThrow('card declined');
        await expect(runIdempotent(reused, declined)).rejects.toThrow('card declined');
        expect(declined).toHaveBeenCalledTimes(1);
      });

      it('keeps scopes apart: the same key in two scopes runs twice', async () => {
        const resolver = vi.fn(async () => 'ok');
        await runIdempotent(call(uniqueScope(), mode).options, resolver);
        await runIdempotent(call(uniqueScope(), mode).options, resolver);
        expect(resolver).toHaveBeenCalledTimes(2);
      });

      it('takes over a record that expired by the store’s clock, whatever the caller’s clock says', async () => {
        const scope = uniqueScope();
        const { options, types } = call(scope, mode, { ttlMs: 60_000 });
        await runIdempotent(options, async () => 'first');
        // This server's clock runs a minute behind: by its clock the record has two minutes left.
        skewProcessClock(-60_000);
        await target().travel(scope, 61_000);
        const again = await runIdempotent(options, async () => 'second');
        expect(again).toMatchObject({ value: 'second', replayed: false });
        expect(types()).toEqual(['claimed', 'completed', 'expired_takeover', 'completed']);
      });

      it('runs again once the record expired, even after replaying it (and caching it) before', async () => {
        const scope = uniqueScope();
        const { options, types } = call(scope, mode, { ttlMs: 60_000 });
        await runIdempotent(options, async () => 'first');
        await expect(runIdempotent(options, async () => 'unused')).resolves.toMatchObject({ replayed: true });
        await target().travel(scope, 61_000);
        await expect(runIdempotent(options, async () => 'second')).resolves.toMatchObject({
          value: 'second',
          replayed: false,
        });
        expect(types()).toEqual(['claimed', 'completed', 'replayed', 'expired_takeover', 'completed']);
      });

      it('replays a record that is live by the store’s clock to a caller whose clock is ahead', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, mode, { ttlMs: 60_000 });
        await runIdempotent(options, async () => 'first');
        await target().travel(scope, 30_000);
        skewProcessClock(+60_000); // past the expiry by this server's clock
        await expect(runIdempotent(options, async () => 'second')).resolves.toMatchObject({
          value: 'first',
          replayed: true,
        });
      });
    });

    describe('transactional mode', () => {
      it('runs 20 concurrent duplicates once and gives every one the same result', async () => {
        const { options } = call(uniqueScope(), 'transactional');
        const resolver = vi.fn(async () => ({ token: randomBytes(8).toString('hex') }));
        const results = await Promise.all(Array.from({ length: 20 }, () => runIdempotent(options, resolver)));
        expect(resolver).toHaveBeenCalledTimes(1);
        expect(new Set(results.map((r) => r.value.token)).size).toBe(1);
        expect(results.filter((r) => !r.replayed)).toHaveLength(1);
      });

      it('runs 8 concurrent duplicates from 8 servers once and gives every one the same result', async () => {
        const { options } = call(uniqueScope(), 'transactional');
        const resolver = vi.fn(async () => ({ token: randomBytes(8).toString('hex') }));
        const results = await Promise.all(
          Array.from({ length: 8 }, () =>
            runIdempotent({ ...options, store: onAnotherServer(options.store) }, resolver),
          ),
        );
        expect(resolver).toHaveBeenCalledTimes(1);
        expect(new Set(results.map((r) => r.value.token)).size).toBe(1);
      });

      (savepoints ? it : it.skip)(
        'keeps a replayable error in its own transaction: a duplicate from another server waiting for the key replays it',
        async () => {
          const declined = Object.assign(new Error('declined'), { code: 'CARD_DECLINED' });
          const replayErrors = (error: unknown) => (error as { code?: string }).code === 'CARD_DECLINED';
          const { options } = call(uniqueScope(), 'transactional', { replayErrors, waitTimeoutMs: 10_000 });
          const running = gate();
          const declining = gate();
          const first = runIdempotent(options, async () => {
            running.open();
            await declining.opened;
            throw declined;
          });
          first.catch(() => undefined);
          await running.opened;
          const duplicate = vi.fn(async () => 'charged');
          const waiting = runIdempotent({ ...options, store: onAnotherServer(options.store) }, duplicate);
          waiting.catch(() => undefined); // awaited below, after the first call's
          // Let the duplicate's claim reach the key and wait for the first call's transaction.
          await new Promise((resolve) => setTimeout(resolve, 50));
          declining.open();
          await expect(first).rejects.toBe(declined);
          await expect(waiting).rejects.toMatchObject({ message: 'declined', code: 'CARD_DECLINED' });
          expect(duplicate).not.toHaveBeenCalled();
        },
      );
    });

    describe('lease mode', () => {
      it('runs 8 concurrent duplicates from 8 servers once: the others answer IN_PROGRESS or replay', async () => {
        const { options } = call(uniqueScope(), 'lease');
        const resolver = vi.fn(async () => 'charged');
        const outcomes = await Promise.all(
          Array.from({ length: 8 }, () =>
            runIdempotent({ ...options, store: onAnotherServer(options.store) }, resolver).catch(
              (e: unknown) => e,
            ),
          ),
        );
        expect(resolver).toHaveBeenCalledTimes(1);
        for (const outcome of outcomes) {
          if (outcome instanceof Error) expect(outcome).toBeInstanceOf(IdempotencyKeyInProgressError);
          else expect(outcome).toMatchObject({ value: 'charged' });
        }
      });

      /** A call of `options` that holds its key (its resolver runs) until `release()`; it answers `done`. */
      async function runningCall(options: RunIdempotentOptions) {
        const held = gate();
        const started = gate();
        const first = runIdempotent(options, async () => {
          started.open();
          await held.opened;
          return 'done';
        });
        await started.opened;
        return { first, release: held.open };
      }

      it('answers a duplicate with IN_PROGRESS and the rest of the lease as its hint once its wait is over', async () => {
        const { options, types } = call(uniqueScope(), 'lease', { leaseMs: 20_000 });
        const { first, release } = await runningCall(options);
        const error = await runIdempotent({ ...options, waitTimeoutMs: 30 }, async () => 'dup').catch(
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyKeyInProgressError);
        expect((error as IdempotencyKeyInProgressError).retryAfterMs).toBeGreaterThan(15_000);
        expect((error as IdempotencyKeyInProgressError).retryAfterMs).toBeLessThanOrEqual(20_000);
        release();
        await expect(first).resolves.toMatchObject({ value: 'done', replayed: false });
        expect(types()).toEqual(['claimed', 'in_progress', 'completed']);
      });

      it('makes a duplicate during the lease wait for the running call and replay its result', async () => {
        const { options, types } = call(uniqueScope(), 'lease', { leaseMs: 20_000 });
        const { first, release } = await runningCall(options);
        const duplicate = vi.fn(async () => 'dup');
        const waiting = runIdempotent(options, duplicate);
        await new Promise((resolve) => setTimeout(resolve, 50));
        release();
        await expect(first).resolves.toMatchObject({ value: 'done', replayed: false });
        await expect(waiting).resolves.toMatchObject({ value: 'done', replayed: true });
        expect(duplicate).not.toHaveBeenCalled();
        // The replay may read the committed result before the first call reports its completion.
        expect(types().sort()).toEqual(['claimed', 'completed', 'replayed']);
      });

      it('never lets a transactional call of the key run while its lease runs, even as a first attempt from another server', async () => {
        const { options } = call(uniqueScope(), 'lease', { leaseMs: 20_000 });
        const { first, release } = await runningCall(options);
        const resolver = vi.fn(async () => 'twice');
        const transactional = {
          ...options,
          store: onAnotherServer(options.store),
          mode: 'transactional' as const,
          firstAttempt: true,
          waitTimeoutMs: 30,
        };
        await expect(runIdempotent(transactional, resolver)).rejects.toBeInstanceOf(
          IdempotencyKeyInProgressError,
        );
        release();
        await expect(first).resolves.toMatchObject({ value: 'done', replayed: false });
        expect(resolver).not.toHaveBeenCalled();
      });

      it('never lets a caller whose clock is ahead take over a lease that is still running', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease', { leaseMs: 30_000 });
        const { first, release } = await runningCall(options);
        await target().travel(scope, 10_000); // 20 s of the lease left by the store's clock
        skewProcessClock(+60_000);
        const resolver = vi.fn(async () => 'twice');
        await expect(runIdempotent({ ...options, waitTimeoutMs: 30 }, resolver)).rejects.toBeInstanceOf(
          IdempotencyKeyInProgressError,
        );
        skewProcessClock(-120_000);
        release();
        await expect(first).resolves.toMatchObject({ value: 'done' });
        expect(resolver).not.toHaveBeenCalled();
      });

      it('lets a request take over a lease that ran out by the store’s clock, and fences the old owner', async () => {
        const scope = uniqueScope();
        const { options, types } = call(scope, 'lease', { leaseMs: 5_000 });
        const held = gate();
        const started = gate();
        const old = runIdempotent(options, async () => {
          started.open();
          await held.opened;
          return 'old owner';
        });
        await started.opened;
        await target().travel(scope, 6_000);
        await expect(runIdempotent(options, async () => 'new owner')).resolves.toMatchObject({
          value: 'new owner',
          replayed: false,
        });
        held.open();
        await expect(old).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
        await expect(runIdempotent(options, async () => 'third')).resolves.toMatchObject({
          value: 'new owner',
          replayed: true,
        });
        expect(types()).toEqual(['claimed', 'expired_takeover', 'completed', 'fenced', 'replayed']);
      });

      it('answers a fenced owner’s replayable error with a 409, whose retry replays the new owner’s result', async () => {
        // The old owner's card was declined after its lease ran out and a retry charged it: the
        // key answers "charged" from now on, so the old request must not answer "declined".
        const scope = uniqueScope();
        const declined = () => Object.assign(new Error('declined'), { code: 'CARD_DECLINED' });
        const { options, types } = call(scope, 'lease', {
          leaseMs: 5_000,
          replayErrors: (error) => (error as { code?: string }).code === 'CARD_DECLINED',
        });
        const held = gate();
        const started = gate();
        const old = runIdempotent(options, async () => {
          started.open();
          await held.opened;
          throw declined();
        });
        await started.opened;
        await target().travel(scope, 6_000);
        await expect(runIdempotent(options, async () => 'charged')).resolves.toMatchObject({
          value: 'charged',
        });
        held.open();
        await expect(old).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
        await expect(runIdempotent(options, async () => 'third')).resolves.toMatchObject({
          value: 'charged',
          replayed: true,
        });
        expect(types()).toEqual(['claimed', 'expired_takeover', 'completed', 'fenced', 'replayed']);
      });

      it('changes or deletes a claim only for the owner token that holds it', async () => {
        const scope = uniqueScope();
        const { lease } = target().store();
        const claim = leaseRequest(scope, 20_000);
        const store = target().store();
        const first = await lease.claim(claim);
        expect(first).toMatchObject({ claimed: true, tookOver: false });
        const second = await lease.claim({ ...claim, ownerToken: 'b'.repeat(64) });
        expect(second).toMatchObject({ claimed: false, existing: { ownerToken: 'a'.repeat(64) } });
        const stranger = { scope, key: 'k', ownerToken: 'b'.repeat(64) };
        const owner = { scope, key: 'k', ownerToken: 'a'.repeat(64) };
        const completion = { result: '"1"', resultIsError: false, ttlMs: 60_000 };
        expect(await lease.extend(stranger, 50_000)).toBe(false);
        expect(await lease.release(stranger)).toBe(false);
        expect(await lease.complete({ ...stranger, ...completion })).toBeNull();
        const held = (await store.find(scope, 'k'))!;
        expect(held).toMatchObject({ status: 'IN_PROGRESS', ownerToken: 'a'.repeat(64) });
        expect(held.liveForMs).toBeGreaterThan(15_000);
        expect(held.liveForMs).toBeLessThanOrEqual(20_000);
        expect(await lease.extend(owner, 50_000)).toBe(true);
        expect((await store.find(scope, 'k'))!.liveForMs).toBeGreaterThan(45_000);
        const completed = await lease.complete({ ...owner, ...completion });
        expect(await lease.release(owner)).toBe(false); // completed: nothing left to release
        const done = (await store.find(scope, 'k'))!;
        expect(done).toMatchObject({ status: 'COMPLETED', result: '"1"', lockedUntil: null, ...completed });
        expect(completed!.expiresAt.getTime() - completed!.completedAt.getTime()).toBe(60_000);
        expect(done.liveForMs).toBeGreaterThan(55_000);
      });

      it('lets another request take over a lease its owner ended, at once', async () => {
        // A database that stores its clock more coarsely than it reads it must not round an
        // ended lease into the future: `timestamp(3)` rounded PostgreSQL's microseconds up to
        // half a millisecond, and a request in that half millisecond saw the lease still held.
        const scope = uniqueScope();
        const { lease } = target().store();
        for (let i = 0; i < 40; i++) {
          const claim = { ...leaseRequest(scope, 30_000), key: `k-${i}` };
          await lease.claim(claim);
          expect(await lease.extend({ scope, key: claim.key, ownerToken: claim.ownerToken }, 0)).toBe(true);
          const other = { ...claim, ownerToken: 'b'.repeat(64), fingerprint: 'e'.repeat(64) };
          expect(await lease.claim(other)).toMatchObject({ claimed: true, tookOver: true });
        }
      });

      it('dates a write by one reading of its clock: a lease and an expiry count from the same instant', async () => {
        await expectOneInstantPerWrite(target().store(), uniqueScope());
      });

      it('takes over an expired lease in the store’s own claim, and only then', async () => {
        const scope = uniqueScope();
        const { lease } = target().store();
        const claim = leaseRequest(scope, 5_000);
        await lease.claim(claim);
        await target().travel(scope, 4_000);
        expect(await lease.claim({ ...claim, ownerToken: 'b'.repeat(64) })).toMatchObject({ claimed: false });
        await target().travel(scope, 2_000);
        expect(await lease.claim({ ...claim, ownerToken: 'b'.repeat(64) })).toMatchObject({
          claimed: true,
          tookOver: true,
        });
        expect(
          await lease.complete({
            scope,
            key: 'k',
            ownerToken: 'a'.repeat(64),
            result: '1',
            resultIsError: false,
            ttlMs: 1,
          }),
        ).toBeNull();
      });
    });

    it('holds the longest ttlMs and leaseMs it accepts, and refuses longer ones before anything runs', async () => {
      const YEAR = 365.25 * 86_400_000;
      for (const mode of ['transactional', 'lease'] as const) {
        const scope = uniqueScope();
        const longest = { ttlMs: MAX_DURATION_MS, leaseMs: MAX_DURATION_MS, maxLeaseMs: MAX_DURATION_MS };
        const { options } = call(scope, mode, longest);
        let runs = 0;
        const held = gate();
        const started = gate();
        const first = runIdempotent(options, async () => {
          runs++;
          started.open();
          await held.opened;
          return 'once';
        });
        await started.opened;
        const other = { ...options, store: onAnotherServer(options.store), waitTimeoutMs: 1 };
        const again = async () => {
          runs++;
          return 'twice';
        };
        if (mode === 'lease') {
          // Its lease runs for a century: another server's duplicate does not take it over.
          await expect(runIdempotent(other, again)).rejects.toBeInstanceOf(IdempotencyKeyInProgressError);
        }
        held.open();
        await expect(first).resolves.toMatchObject({ value: 'once', replayed: false });
        const replay = await runIdempotent(other, again);
        expect(replay).toMatchObject({ value: 'once', replayed: true });
        expect(replay.record.expiresAt.getTime()).toBeGreaterThan(Date.now() + 99 * YEAR);
        expect(runs).toBe(1);
        const tooLong = [{ ttlMs: MAX_DURATION_MS + 1 }, { leaseMs: MAX_DURATION_MS + 1 }];
        // Transactional mode holds no lease, and reads no leaseMs.
        for (const longer of mode === 'lease' ? tooLong : tooLong.slice(0, 1)) {
          await expect(
            runIdempotent({ ...options, key: 'k-2', ...longer, maxLeaseMs: MAX_DURATION_MS + 1 }, again),
          ).rejects.toThrow(RangeError);
        }
        expect(runs).toBe(1);
      }
    });

    it('answers with its result when its lease completion committed but the answer was lost', async () => {
      const scope = uniqueScope();
      const { options, types } = call(scope, 'lease');
      const { store } = options;
      let lost = 1;
      // Wrapped as the store wraps (`Object.create`): a cache's members are inherited, not own.
      const lease: NonNullable<typeof store.lease> = Object.assign(Object.create(store.lease!), {
        async complete(completion: Parameters<typeof lease.complete>[0]) {
          const completed = await store.lease!.complete(completion);
          if (lost-- > 0) throw new IdempotencyStoreUnavailableError('the answer was lost');
          return completed;
        },
      });
      const losing: typeof store = Object.assign(Object.create(store), { lease });
      let runs = 0;
      const charge = async () => ++runs;
      await expect(runIdempotent({ ...options, store: losing }, charge)).resolves.toMatchObject({
        value: 1,
        replayed: false,
      });
      await expect(runIdempotent(options, charge)).resolves.toMatchObject({ value: 1, replayed: true });
      expect(runs).toBe(1);
      expect(types()).toEqual(['claimed', 'completed', 'replayed']);
    });

    describe('durable steps (lease mode)', () => {
      /** A three-step mutation whose steps count their runs; `crashAfter` makes it fail after that step. */
      function checkout(names = ['reserve', 'charge', 'ship']) {
        const runs: Record<string, number> = {};
        const keys: Record<string, string[]> = {};
        const resolver =
          (crashAfter?: string, order = names) =>
          async (_tx: unknown, claim: ResolverClaim<unknown>) => {
            const step = claim.step as Step<unknown>;
            const done: unknown[] = [];
            for (const name of order) {
              done.push(
                await step(name, ({ key }) => {
                  runs[name] = (runs[name] ?? 0) + 1;
                  keys[name] = [...(keys[name] ?? []), key];
                  return { name, at: new Date(runs[name]) };
                }),
              );
              if (name === crashAfter) throw new Error(`crash after ${name}`);
            }
            return done;
          };
        return { runs, keys, resolver };
      }

      it('resumes after the stored steps: each step runs once, and a later retry replays the result', async () => {
        const scope = uniqueScope();
        const { options, types } = call(scope, 'lease');
        const { runs, keys, resolver } = checkout();
        await expect(runIdempotent(options, resolver('charge'))).rejects.toThrow('crash after charge');
        // The claim stays (its lease ended) so that the retry resumes instead of starting again.
        expect(await options.store.find(scope, 'k-1')).toMatchObject({ status: 'IN_PROGRESS' });
        const resumed = await runIdempotent(options, resolver());
        expect(resumed.replayed).toBe(false);
        expect(resumed.value).toEqual([
          { name: 'reserve', at: new Date(1) },
          { name: 'charge', at: new Date(1) },
          { name: 'ship', at: new Date(1) },
        ]);
        await expect(runIdempotent(options, resolver())).resolves.toMatchObject({
          replayed: true,
          value: resumed.value,
        });
        expect(runs).toEqual({ reserve: 1, charge: 1, ship: 1 });
        expect(keys.charge).toEqual([stepKey(scope, 'k-1', 'charge')]);
        expect(types()).toEqual(['claimed', 'released', 'expired_takeover', 'completed', 'replayed']);
      });

      it('keeps the stored steps when a resumed call fails before its first step', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease');
        const { runs, resolver } = checkout();
        await expect(runIdempotent(options, resolver('charge'))).rejects.toThrow('crash after charge');
        // Takes the key over, then fails before it reads the steps it would resume.
        await expect(
          runIdempotent(options, async () => {
            throw new Error('inventory service timed out');
          }),
        ).rejects.toThrow('inventory service timed out');
        expect(await options.store.find(scope, 'k-1')).toMatchObject({ status: 'IN_PROGRESS' });
        await runIdempotent(options, resolver());
        expect(runs).toEqual({ reserve: 1, charge: 1, ship: 1 });
      });

      it('keeps the steps a takeover resumes as long as its record, so a later takeover resumes them too', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease', { leaseMs: 5_000, ttlMs: 60_000 });
        const { runs, resolver } = checkout();
        await expect(runIdempotent(options, resolver('reserve'))).rejects.toThrow('crash after reserve');
        await target().travel(scope, 40_000);
        // Takes over (its record now expires 60 s on), resumes 'reserve', stores 'charge', fails.
        await expect(runIdempotent(options, resolver('charge'))).rejects.toThrow('crash after charge');
        await target().travel(scope, 30_000); // 'reserve' was stored 70 s ago; the record lives 30 s more
        await runIdempotent(options, resolver());
        expect(runs).toEqual({ reserve: 1, charge: 1, ship: 1 });
      });

      it('keeps the steps live at a takeover, though they expire before it keeps them (a stall in between)', async () => {
        const scope = uniqueScope();
        const { options, types } = call(scope, 'lease', { leaseMs: 5_000, ttlMs: 60_000 });
        const { runs, resolver } = checkout();
        await expect(runIdempotent(options, resolver('charge'))).rejects.toThrow('crash after charge');
        await target().travel(scope, 58_000); // the record and its steps expire 2 s from now
        // The takeover comes before that; keeping its steps (a statement of its own) after it.
        const steps = options.store.steps!;
        const stalling = Object.assign(Object.create(options.store) as Store<unknown>, {
          steps: Object.assign(Object.create(steps) as typeof steps, {
            keep: async (owner: LeaseOwner) => {
              await target().travel(scope, 5_000);
              await steps.keep?.(owner);
            },
          }),
        });
        await runIdempotent({ ...options, store: stalling }, resolver());
        expect(runs).toEqual({ reserve: 1, charge: 1, ship: 1 });
        expect(types()).toEqual(['claimed', 'released', 'expired_takeover', 'completed']);
      });

      it('resumes a call whose lease ran out (its process died) on another server', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease', { leaseMs: 5_000 });
        const { runs, resolver } = checkout();
        const died = gate();
        const stuck = runIdempotent(options, async (_tx, claim) => {
          await claim.step?.('reserve', () => {
            runs.reserve = 1;
          });
          await claim.step?.('charge', () => {
            runs.charge = 1;
          });
          await died.opened; // never resumes: the process is gone
          return 'never';
        });
        await vi.waitFor(() => expect(runs).toEqual({ reserve: 1, charge: 1 }));
        await target().travel(scope, 6_000);
        const other = { ...options, store: onAnotherServer(options.store) };
        await expect(runIdempotent(other, resolver())).resolves.toMatchObject({ replayed: false });
        expect(runs).toEqual({ reserve: 1, charge: 1, ship: 1 });
        died.open();
        await expect(stuck).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
      });

      it('runs no step’s fn once its heartbeat found the lease taken over', async () => {
        const scope = uniqueScope();
        const { options, types } = call(scope, 'lease', { ttlMs: 60_000 });
        // The old owner's renewals wait until the key has been taken over, so none renews the lease
        // between the clock's move and the takeover; then they find it gone.
        const { store } = options;
        const beats = gate();
        const renewals = Object.assign(Object.create(store.lease) as Store<unknown>['lease'], {
          extend: async (owner: LeaseOwner, leaseMs: number) => {
            await beats.opened;
            return store.lease.extend(owner, leaseMs);
          },
        });
        const oldStore = Object.assign(Object.create(store) as Store<unknown>, { lease: renewals });
        let charges = 0;
        const charge = (claim: ResolverClaim<unknown>) =>
          (claim.step as Step<unknown>)('charge', () => ++charges);
        const held = gate();
        const started = gate();
        const old = runIdempotent(
          { ...options, store: oldStore, leaseMs: 1_000, heartbeatMs: 20, maxLeaseMs: 59_000 },
          async (_tx, claim) => {
            started.open();
            await held.opened;
            return charge(claim);
          },
        );
        await started.opened;
        await target().travel(scope, 2_000);
        const retryHeld = gate();
        const retry = runIdempotent(options, async (_tx, claim) => {
          await retryHeld.opened;
          return charge(claim);
        });
        while (!types().includes('expired_takeover')) await new Promise((resolve) => setTimeout(resolve, 5));
        beats.open();
        // The old owner's next answered beat finds the lease gone (real time: the heartbeat is a timer).
        while (!types().includes('fenced')) await new Promise((resolve) => setTimeout(resolve, 5));
        held.open();
        await expect(old).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
        expect(charges).toBe(0);
        retryHeld.open();
        await expect(retry).resolves.toMatchObject({ value: 1, replayed: false });
        expect(charges).toBe(1);
      });

      it('runs no step’s fn once the call’s clock says its lease may have run out and nothing renews it', async () => {
        const scope = uniqueScope();
        let now = 0;
        // No heartbeat: the lease lasts 1 s from the claim, by the call's clock as by the store's.
        const { options } = call(scope, 'lease', { leaseMs: 1_000, ttlMs: 60_000, clock: () => now });
        let charges = 0;
        const charge = (claim: ResolverClaim<unknown>) =>
          (claim.step as Step<unknown>)('charge', () => ++charges);
        const held = gate();
        const started = gate();
        const old = runIdempotent(options, async (_tx, claim) => {
          started.open();
          await held.opened; // a slow lookup before the charge
          return charge(claim);
        });
        await started.opened;
        now += 2_000;
        await target().travel(scope, 2_000);
        const retryHeld = gate();
        const retryStarted = gate();
        const retry = runIdempotent(options, async (_tx, claim) => {
          retryStarted.open();
          await retryHeld.opened;
          return charge(claim);
        });
        await retryStarted.opened; // it took the key over, and will charge
        held.open();
        await expect(old).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
        expect(charges).toBe(0);
        retryHeld.open();
        await expect(retry).resolves.toMatchObject({ value: 1, replayed: false });
        expect(charges).toBe(1);
      });

      it('answers IDEMPOTENCY_OUTCOME_UNKNOWN, not a 409 naming another request, when the lease it doubts before a step is still its own', async () => {
        const scope = uniqueScope();
        let now = 0;
        // No heartbeat: by the call's clock its 1 s lease ran out; by the store's, nothing moved.
        const { options, types } = call(scope, 'lease', { leaseMs: 1_000, ttlMs: 60_000, clock: () => now });
        let charges = 0;
        const charge = (claim: ResolverClaim<unknown>) =>
          (claim.step as Step<unknown>)('charge', () => ++charges);
        const first = runIdempotent(options, async (_tx, claim) => {
          now += 2_000; // a slow lookup before the charge
          return charge(claim);
        });
        await expect(first).rejects.toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' });
        expect(charges).toBe(0);
        expect(types()).toContain('outcome_unknown');
        expect(types()).not.toContain('fenced'); // nobody took the key over
        // The key was freed: a retry runs the mutation, and its charge, once.
        await expect(runIdempotent(options, async (_tx, claim) => charge(claim))).resolves.toMatchObject({
          value: 1,
          replayed: false,
        });
        expect(charges).toBe(1);
      });

      it('counts a lease from the claim that took the key, not from before a wait for the call that held it', async () => {
        const scope = uniqueScope();
        let now = 0;
        // No heartbeat: the lease lasts 30 s from the claim.
        const { options } = call(scope, 'lease', {
          leaseMs: 30_000,
          ttlMs: 60_000,
          waitTimeoutMs: 30_000,
          clock: () => now,
        });
        const held = gate();
        const started = gate();
        const first = runIdempotent(options, async () => {
          started.open();
          await held.opened;
          now += 20_000;
          throw new Error('card service down');
        });
        await started.opened;
        const other = onAnotherServer(options.store);
        const waiting = gate();
        const watched = Object.assign(Object.create(other) as Store<unknown>, {
          find: async (scope: string, key: string) => {
            const found = await other.find(scope, key);
            if (found?.status === 'IN_PROGRESS') waiting.open();
            return found;
          },
        });
        let charges = 0;
        // A first attempt: no read before its claim, which finds the key held and waits there.
        const second = runIdempotent(
          { ...options, store: watched, firstAttempt: true },
          async (_tx, claim) => {
            now += 15_000; // 35 s after its wait began, 15 s into its own lease
            return (claim.step as Step<unknown>)('charge', () => ++charges);
          },
        );
        await waiting.opened; // it found the first call running, and waits for it
        held.open();
        await expect(first).rejects.toThrow('card service down');
        await expect(second).resolves.toMatchObject({ value: 1, replayed: false });
        expect(charges).toBe(1);
      });

      it('runs a step’s fn once a renewal sent before it confirms a lease the call’s clock doubted', async () => {
        const scope = uniqueScope();
        let now = 0;
        const { options } = call(scope, 'lease', { ttlMs: 60_000, clock: () => now });
        const { store } = options;
        let beatsFail = true;
        let renewals = 0;
        const flaky = Object.assign(Object.create(store.lease) as Store<unknown>['lease'], {
          extend: async (owner: LeaseOwner, leaseMs: number) => {
            if (beatsFail) throw new Error('connection reset');
            renewals++;
            return store.lease.extend(owner, leaseMs);
          },
        });
        const flakyStore = Object.assign(Object.create(store) as Store<unknown>, { lease: flaky });
        let charges = 0;
        const run = runIdempotent(
          { ...options, store: flakyStore, leaseMs: 1_000, heartbeatMs: 20, maxLeaseMs: 59_000 },
          async (_tx, claim) => {
            now += 2_000; // renewals failed meanwhile; the store's lease may or may not have run out
            beatsFail = false;
            return (claim.step as Step<unknown>)('charge', () => ++charges);
          },
        );
        await expect(run).resolves.toMatchObject({ value: 1, replayed: false });
        expect(renewals).toBeGreaterThan(0);
        expect(charges).toBe(1);
      });

      it('keeps renewing the lease while a step runs beside a failed resolver, so no retry runs it again', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease', { ttlMs: 60_000 });
        const { store } = options;
        let traveled = false;
        let beatsAfterTravel = 0;
        const counted = Object.assign(Object.create(store.lease) as Store<unknown>['lease'], {
          extend: async (owner: LeaseOwner, leaseMs: number) => {
            const sentAfter = traveled;
            const extended = await store.lease.extend(owner, leaseMs);
            if (sentAfter && extended) beatsAfterTravel++;
            return extended;
          },
        });
        const first = Object.assign(Object.create(store) as Store<unknown>, { lease: counted });
        let charges = 0;
        const gateway = gate();
        const charge = (claim: ResolverClaim<unknown>) =>
          (claim.step as Step<unknown>)('charge', async () => {
            await gateway.opened; // the gateway answers slowly
            return ++charges;
          });
        await expect(
          runIdempotent(
            { ...options, store: first, leaseMs: 1_000, heartbeatMs: 20, maxLeaseMs: 59_000 },
            async (_tx, claim) => {
              // The caller's own timeout gives up beside the charge, which goes on.
              await Promise.all([charge(claim), Promise.reject(new Error('gave up waiting'))]);
            },
          ),
        ).rejects.toThrow('gave up waiting');
        await target().travel(scope, 2_000); // the lease would have run out, but for the heartbeat
        traveled = true;
        await vi.waitFor(() => expect(beatsAfterTravel).toBeGreaterThan(0)); // real time: a timer
        const retry = { ...options, leaseMs: 1_000, waitTimeoutMs: 0 };
        await expect(runIdempotent(retry, async (_tx, claim) => charge(claim))).rejects.toBeInstanceOf(
          IdempotencyKeyInProgressError,
        );
        gateway.open();
        await vi.waitFor(() => expect(charges).toBe(1));
        await target().travel(scope, 2_000); // the step stored its result: the heartbeat stopped
        await expect(runIdempotent(retry, async (_tx, claim) => charge(claim))).resolves.toMatchObject({
          value: 1,
          replayed: false,
        });
        expect(charges).toBe(1);
      });

      it('hands each step a key of its own, the same on every attempt', () => {
        const key = stepKey('alice', 'k-1', 'charge');
        expect(key).toMatch(/^[0-9a-f]{64}$/);
        expect(stepKey('alice', 'k-1', 'charge')).toBe(key);
        expect(
          new Set([
            key,
            stepKey('alice', 'k-1', 'ship'),
            stepKey('bob', 'k-1', 'charge'),
            stepKey('alice', 'k-2', 'charge'),
            stepKey('alice', 'k-1charge', ''),
          ]).size,
        ).toBe(5);
      });

      it('fails a retry whose steps diverge from the stored ones, and stores nothing', async () => {
        const scope = uniqueScope();
        // Even with every error replayable, a divergence is not the call's outcome.
        const { options } = call(scope, 'lease', { replayErrors: () => true });
        const { runs, resolver } = checkout();
        const crash = Object.assign(new Error('gateway down'), { transient: true });
        const failing = runIdempotent({ ...options, replayErrors: (e) => e !== crash }, async (tx, claim) => {
          await resolver()(tx, claim);
          throw crash;
        });
        await expect(failing).rejects.toBe(crash);
        await expect(runIdempotent(options, resolver(undefined, ['reserve', 'ship']))).rejects.toBeInstanceOf(
          IdempotencyStepDivergedError,
        );
        expect(await options.store.steps!.list(scope, 'k-1')).toHaveLength(3);
        expect(await options.store.find(scope, 'k-1')).toMatchObject({ status: 'IN_PROGRESS' });
        await expect(runIdempotent(options, resolver())).resolves.toMatchObject({ replayed: false });
        expect(runs).toEqual({ reserve: 1, charge: 1, ship: 1 });
      });

      it('runs a step whose fn failed again on the retry, and replays the steps stored after it', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease');
        let attempt = 0;
        const runs = { notify: 0, charge: 0 };
        const resolver = async (_tx: unknown, { step }: ResolverClaim<unknown>) => {
          attempt++;
          // Best effort: its failure is caught, so it stores nothing and the call goes on.
          await step!('notify', () => {
            runs.notify++;
            if (attempt === 1) throw new Error('mail server down');
          }).catch(() => undefined);
          const charge = await step!('charge', () => `ch_${++runs.charge}`);
          if (attempt === 1) throw new Error('crash after the charge');
          return charge;
        };
        await expect(runIdempotent(options, resolver)).rejects.toThrow('crash after the charge');
        expect((await options.store.steps!.list(scope, 'k-1')).map((s) => [s.name, s.position])).toEqual([
          ['charge', 1],
        ]);
        // The stored step at another position is still a divergence, and stays stored.
        const skipping = runIdempotent(options, async (_tx, { step }) => step!('charge', () => 'ch_again'));
        await expect(skipping).rejects.toMatchObject({ code: 'IDEMPOTENCY_STEP_DIVERGED' });
        await expect(runIdempotent(options, resolver)).resolves.toMatchObject({
          value: 'ch_1',
          replayed: false,
        });
        expect(runs).toEqual({ notify: 2, charge: 1 });
      });

      // Call A's lease ran out and B took the key over before A's step stored its record: the step's
      // record is fenced (a plain step's effect has happened). A 409 is answered only while B's
      // record will answer A's retry; otherwise nobody will say what happened.
      it.each([
        ['plain', 'holds the key with the same input', 'IDEMPOTENCY_KEY_IN_PROGRESS'],
        ['plain', 'ended its lease', 'IDEMPOTENCY_OUTCOME_UNKNOWN'],
        ['plain', 'completed another input', 'IDEMPOTENCY_OUTCOME_UNKNOWN'],
        ['transactional', 'ended its lease', 'IDEMPOTENCY_OUTCOME_UNKNOWN'],
      ])('answers a fenced %s step whose new owner %s with %s', async (step, owner, code) => {
        const scope = uniqueScope();
        const { options, types } = call(scope, 'lease');
        const other = { ...options, store: onAnotherServer(options.store) };
        const running = gate();
        const done = gate();
        let taker: Promise<unknown> = Promise.resolve();
        const takeOver = async () => {
          await target().travel(scope, 31_000); // A's lease ran out
          if (owner.startsWith('holds')) {
            taker = runIdempotent(other, async () => {
              running.open();
              await done.opened;
              return 'B';
            });
            await running.opened;
          } else if (owner.startsWith('ended')) {
            // B fails before its first step: it ends its lease and keeps the key's steps for a retry.
            const failing = runIdempotent(other, async () => {
              throw new Error('gateway 400');
            });
            await expect(failing).rejects.toThrow('gateway 400');
          } else {
            await runIdempotent({ ...other, input: { amount: 11 } }, async () => 'B');
          }
        };
        let charges = 0;
        const error = await runIdempotent(options, async (_tx, claim) => {
          await takeOver();
          return claim.step!('charge', () => ++charges, { transactional: step === 'transactional' });
        }).catch((e: unknown) => e);
        done.open();
        await taker;
        expect(error).toMatchObject({ code, status: code === 'IDEMPOTENCY_KEY_IN_PROGRESS' ? 409 : 500 });
        expect(charges).toBe(1);
        expect(await options.store.steps!.list(scope, 'k-1')).toEqual([]);
        expect(types()).toContain('fenced');
        expect(types().includes('outcome_unknown')).toBe(code === 'IDEMPOTENCY_OUTCOME_UNKNOWN');
      });

      it('refuses, before its fn runs, a step name some database would store as another or not at all', async () => {
        const { options } = call(uniqueScope(), 'lease');
        const fn = vi.fn(() => 'sent');
        for (const name of ['email ann ', 'email\u0000ann', 'email \ud800']) {
          await expect(runIdempotent(options, async (_tx, { step }) => step!(name, fn))).rejects.toThrow(
            TypeError,
          );
        }
        expect(fn).not.toHaveBeenCalled();
        // Spaces inside a name, and a trailing tab, are names like any other.
        await expect(
          runIdempotent(options, async (_tx, { step }) => [
            await step!('email ann', fn),
            await step!('email\t', fn),
          ]),
        ).resolves.toMatchObject({ value: ['sent', 'sent'] });
      });

      it('refuses a step name used twice in one call', async () => {
        const { options } = call(uniqueScope(), 'lease');
        const fn = vi.fn(() => 'ran');
        const error = await runIdempotent(options, async (_tx, { step }) => {
          await step!('charge', fn);
          return step!('charge', fn);
        }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(IdempotencyStepDivergedError);
        expect(fn).toHaveBeenCalledTimes(1);
      });

      it('never keeps the error of a step started inside another, whatever replayErrors says', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease', { replayErrors: () => true });
        const charge = vi.fn(() => 'ch_1');
        // A helper that runs a step of its own, called inside another step's fn.
        const nested = async (_tx: unknown, { step }: ResolverClaim<unknown>) =>
          step!('checkout', () => step!('charge', charge));
        await expect(runIdempotent(options, nested)).rejects.toThrow(/started while another step ran/);
        expect(charge).not.toHaveBeenCalled();
        expect(await options.store.steps!.list(scope, 'k-1')).toEqual([]);
        // The code fixed, the call runs: nothing of the mistake was kept for the key.
        const fixed = async (_tx: unknown, { step }: ResolverClaim<unknown>) => step!('charge', charge);
        await expect(runIdempotent(options, fixed)).resolves.toMatchObject({
          value: 'ch_1',
          replayed: false,
        });
      });

      it('stores a step error that replayErrors accepts and replays it without running the step', async () => {
        const scope = uniqueScope();
        const replayErrors = (error: unknown) => (error as { code?: string }).code === 'CARD_DECLINED';
        const { options } = call(scope, 'lease', { replayErrors });
        const charge = vi.fn(() => {
          throw Object.assign(new Error('declined'), { code: 'CARD_DECLINED' });
        });
        const resolver = async (_tx: unknown, { step }: ResolverClaim<unknown>) => {
          const outcome = await step!('charge', charge).catch((e: Error) => e.message);
          await step!('notify', () => {
            throw new Error('mail server down'); // not replayable: the call can be retried
          });
          return outcome;
        };
        await expect(runIdempotent(options, resolver)).rejects.toThrow('mail server down');
        await expect(runIdempotent(options, resolver)).rejects.toThrow('mail server down');
        expect(charge).toHaveBeenCalledTimes(1);
        const [stored] = await options.store.steps!.list(scope, 'k-1');
        expect(stored).toMatchObject({ name: 'charge', position: 0, resultIsError: true });
      });

      it('keeps a transactional step with its result and replays it', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease');
        const fn = vi.fn(({ tx }: { tx: unknown }) => ({ id: 7, hasTx: tx !== null }));
        const failing = vi.fn(() => {
          throw new Error('rolled back');
        });
        const resolver =
          (crash: boolean) =>
          async (_tx: unknown, { step }: ResolverClaim<unknown>) => {
            const order = await step!('order', fn, { transactional: true });
            if (crash) await step!('fails', failing, { transactional: true });
            return order;
          };
        await expect(runIdempotent(options, resolver(true))).rejects.toThrow('rolled back');
        expect((await options.store.steps!.list(scope, 'k-1')).map((s) => s.name)).toEqual(['order']);
        await expect(runIdempotent(options, resolver(false))).resolves.toMatchObject({ value: { id: 7 } });
        expect(fn).toHaveBeenCalledTimes(1);
      });

      it('refuses a stale owner’s step writes (fencing) and lets only the owner clear steps', async () => {
        const scope = uniqueScope();
        const store = target().store();
        const claim = leaseRequest(scope, 5_000);
        const a = { scope, key: 'k', ownerToken: 'a'.repeat(64) };
        const b = { scope, key: 'k', ownerToken: 'b'.repeat(64) };
        const step = (name: string, position: number) => ({
          name,
          position,
          fingerprint: 'f'.repeat(64),
          result: `"${name}"`,
          resultIsError: false,
          ttlMs: 60_000,
        });
        await store.lease.claim(claim);
        expect(await store.steps!.save({ ...a, ...step('reserve', 0) })).toBe(true);
        expect(await store.steps!.save({ ...b, ...step('charge', 1) })).toBe(false);
        await store.steps!.clear(b);
        const [kept, ...rest] = await store.steps!.list(scope, 'k');
        expect(rest).toEqual([]);
        expect(kept).toMatchObject({
          name: 'reserve',
          position: 0,
          result: '"reserve"',
          resultIsError: false,
        });
        expect(kept!.liveForMs).toBeGreaterThan(55_000);
        await target().travel(scope, 6_000);
        expect(await store.lease.claim({ ...claim, ownerToken: b.ownerToken })).toMatchObject({
          tookOver: true,
        });
        expect(await store.steps!.save({ ...a, ...step('charge', 1) })).toBe(false);
        await store.steps!.clear(a);
        expect(await store.steps!.list(scope, 'k')).toHaveLength(1);
        expect(await store.steps!.save({ ...b, ...step('charge', 1) })).toBe(true);
        expect((await store.steps!.list(scope, 'k')).map((s) => s.name)).toEqual(['reserve', 'charge']);
        await store.steps!.clear(b);
        expect(await store.steps!.list(scope, 'k')).toEqual([]);
      });

      it('runs the steps again for another input or once the record expired', async () => {
        const scope = uniqueScope();
        const { options } = call(scope, 'lease', { ttlMs: 60_000 });
        const { runs, resolver } = checkout();
        await expect(runIdempotent(options, resolver('charge'))).rejects.toThrow();
        // Another input takes over the ended lease: the steps are not its own.
        const other = { ...options, input: { amount: 11 } };
        await expect(runIdempotent(other, resolver())).resolves.toMatchObject({ replayed: false });
        expect(runs).toEqual({ reserve: 2, charge: 2, ship: 1 });
        await target().travel(scope, 61_000);
        await expect(runIdempotent(other, resolver())).resolves.toMatchObject({ replayed: false });
        expect(runs).toEqual({ reserve: 3, charge: 3, ship: 2 });
      });

      it('expires the steps with their record, so a retry after it runs them again, swept or not', async () => {
        // Steps stored well after the claim: a step that outlived its expired record would be
        // resumed by a takeover, yet cleared by a fresh claim once a sweep deleted the record.
        const scope = uniqueScope();
        const { options } = call(scope, 'lease', { leaseMs: 30_000, ttlMs: 60_000 });
        const { runs, resolver } = checkout();
        const late = async (tx: unknown, claim: ResolverClaim<unknown>) => {
          await target().travel(scope, 20_000);
          return resolver('charge')(tx, claim);
        };
        await expect(runIdempotent(options, late)).rejects.toThrow('crash after charge');
        await target().travel(scope, 41_000); // the record expired 1 s ago; its steps were stored 41 s ago
        expect(await options.store.find(scope, 'k-1')).toMatchObject({ status: 'IN_PROGRESS' });
        await expect(runIdempotent(options, resolver())).resolves.toMatchObject({ replayed: false });
        expect(runs).toEqual({ reserve: 2, charge: 2, ship: 1 });
      });

      it('offers no steps in transactional mode', async () => {
        const { options } = call(uniqueScope(), 'transactional');
        const { value } = await runIdempotent(options, async (_tx, claim) => claim.step === undefined);
        expect(value).toBe(true);
      });
    });
  });
}

/**
 * A lease claim's `lockedUntil` and `expiresAt`, and a completion's `expiresAt`, count from the
 * write's own instant (its `createdAt`, its `completedAt`): a store reads its clock once per write,
 * as a statement has one `now()`.
 */
export async function expectOneInstantPerWrite(store: Store<unknown>, scope: string): Promise<void> {
  const owner = { scope, key: 'k', ownerToken: 'a'.repeat(64) };
  const claim = { ...owner, operation: 'op', fingerprint: 'f'.repeat(64), ttlMs: 60_000, leaseMs: 4_000 };
  await store.lease.claim(claim);
  const held = (await store.find(scope, 'k'))!;
  expect(held.lockedUntil!.getTime() - held.createdAt.getTime()).toBe(4_000);
  expect(held.expiresAt.getTime() - held.createdAt.getTime()).toBe(60_000);
  const completed = await store.lease.complete({
    ...owner,
    result: '"1"',
    resultIsError: false,
    ttlMs: 90_000,
  });
  expect(completed!.expiresAt.getTime() - completed!.completedAt.getTime()).toBe(90_000);
  // The same in a transaction: its claim, and its completion.
  const inTransaction = { scope, key: 't', operation: 'op', fingerprint: 'f'.repeat(64), ttlMs: 60_000 };
  await store.transaction!(async (session) => {
    expect(await session.claim(inTransaction)).toMatchObject({ claimed: true });
    const done = await session.complete({
      scope,
      key: 't',
      result: '"1"',
      resultIsError: false,
      ttlMs: 90_000,
    });
    expect(done.expiresAt.getTime() - done.completedAt.getTime()).toBe(90_000);
  });
  const kept = (await store.find(scope, 't'))!;
  expect(kept.expiresAt.getTime() - kept.createdAt.getTime()).toBeGreaterThanOrEqual(90_000);
  expect(kept.expiresAt.getTime() - kept.completedAt!.getTime()).toBe(90_000);
}
