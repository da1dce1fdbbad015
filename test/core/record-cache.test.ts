import { describe, expect, it } from 'vitest';
import { memoryStore, runIdempotent, type Store, withLocalCache } from '../../src/index.js';
import { countingReads } from '../helpers/counting-reads.js';

/** A memory store on a clock the test moves, counting the reads that reach it. */
function countedStore() {
  let now = 1_000_000;
  const clock = () => now;
  return { ...countingReads(memoryStore({ clock })), clock, travel: (ms: number) => (now += ms) };
}

/** Counts the claims made through `store`, in either mode, from now on. */
function spyOnClaims(store: Store<undefined>) {
  const claims = { count: 0 };
  const { transaction, lease } = store;
  Object.assign(store, {
    transaction: (work: Parameters<NonNullable<Store<undefined>['transaction']>>[0]) =>
      transaction!.call(store, (session) => {
        claims.count++;
        return work(session);
      }),
    lease: Object.assign(Object.create(lease) as typeof lease, {
      claim: (request: Parameters<typeof lease.claim>[0]) => {
        claims.count++;
        return lease.claim(request);
      },
    }),
  });
  return claims;
}

const call = (store: Store<undefined>, key: string, extra: Record<string, unknown> = {}) =>
  runIdempotent({ store, scope: 'alice', key, operation: 'pay', input: { amount: 1 }, ...extra }, () => ({
    paid: key,
  }));

describe('withLocalCache', () => {
  it.each(['transactional', 'lease'] as const)(
    'keeps what this process completed (%s): its first replay reads nothing',
    async (mode) => {
      const { store, reads, clock } = countedStore();
      const cached = withLocalCache(store, { max: 10, clock });
      await call(cached, 'k', { mode });
      const afterRun = reads.count;
      const replay = await call(cached, 'k', { mode });
      expect(replay).toMatchObject({ replayed: true, value: { paid: 'k' } });
      expect(reads.count).toBe(afterRun);
    },
  );

  it('keeps nothing from a transaction that did not commit', async () => {
    const { store, reads, clock } = countedStore();
    const failing: Store<undefined> = Object.assign(Object.create(store) as Store<undefined>, {
      async transaction(work: Parameters<NonNullable<Store<undefined>['transaction']>>[0]) {
        // The work completes its record, then the commit fails: nothing is kept.
        await store.transaction!(async (session) => {
          await work(session);
          throw new Error('commit failed');
        });
      },
    });
    const cached = withLocalCache(failing, { max: 10, clock });
    await expect(call(cached, 'k')).rejects.toThrow('commit failed');
    const before = reads.count;
    await expect(cached.find('alice', 'k')).resolves.toBeNull();
    expect(reads.count).toBe(before + 1);
  });

  it('ends a kept completion ttlMs after it was sent, by its own clock, less a store clock step', async () => {
    const { store, reads, clock, travel } = countedStore();
    const cached = withLocalCache(store, { max: 10, clock });
    await call(cached, 'k', { ttlMs: 1_000 });
    // A database stores the completion's instant truncated to the millisecond: the record may end
    // up to 1 ms before ttlMs after the completion was sent.
    travel(998);
    const before = reads.count;
    expect((await cached.find('alice', 'k'))?.liveForMs).toBe(1);
    expect(reads.count).toBe(before);
    travel(1);
    await cached.find('alice', 'k');
    expect(reads.count).toBe(before + 1);
  });

  it('ends a record it read (completed by another server) when the record ends, timed from when the read was sent', async () => {
    const { store, reads, clock, travel } = countedStore();
    await call(store, 'k', { ttlMs: 1_000 }); // completed by another server
    travel(400);
    // The read takes 100 ms by this process's clock: the record's 600 ms count from its sending.
    const slowReads: Store<undefined> = Object.assign(Object.create(store) as Store<undefined>, {
      async find(scope: string, key: string) {
        const record = await store.find(scope, key);
        travel(100);
        return record;
      },
    });
    const cached = withLocalCache(slowReads, { max: 10, clock });
    expect((await cached.find('alice', 'k'))?.liveForMs).toBe(600);
    const before = reads.count;
    travel(498); // 598 ms after the read was sent, a store clock step before the record's end
    expect((await cached.find('alice', 'k'))?.liveForMs).toBe(1);
    expect(reads.count).toBe(before);
    travel(1); // the record may have ended (not this memory store's: 1 ms left), so the store answers
    expect((await cached.find('alice', 'k'))?.liveForMs).toBe(1);
    expect(reads.count).toBe(before + 1);
  });

  it('is bounded in bytes: least recently used go first, and a record too large is not kept', async () => {
    const { store, reads, clock } = countedStore();
    const result = 'x'.repeat(1_000);
    const big = (key: string) =>
      runIdempotent({ store: cached, scope: 'alice', key, operation: 'pay', input: {} }, () => result);
    // Room for two records of about 2 KB each, not three.
    const cached = withLocalCache(store, { max: 100, maxBytes: 5_500, clock });
    await big('a');
    await big('b');
    await cached.find('alice', 'a'); // a is now the most recently used
    await big('c'); // evicts b
    const before = reads.count;
    await cached.find('alice', 'a');
    await cached.find('alice', 'c');
    expect(reads.count).toBe(before);
    await cached.find('alice', 'b');
    expect(reads.count).toBe(before + 1);

    const small = withLocalCache(store, { max: 100, maxBytes: 1_000, clock });
    await small.find('alice', 'a');
    await small.find('alice', 'a');
    expect(reads.count).toBe(before + 3);
  });

  it.each(['transactional', 'lease'] as const)(
    'answers a first attempt whose record it keeps from memory (%s): no read, no claim',
    async (mode) => {
      const { store, reads, clock } = countedStore();
      const cached = withLocalCache(store, { max: 10, clock });
      await call(cached, 'k', { mode });
      const claims = spyOnClaims(cached);
      const before = reads.count;
      const replay = await call(cached, 'k', { mode, firstAttempt: true });
      expect(replay).toMatchObject({ replayed: true, value: { paid: 'k' } });
      expect([reads.count - before, claims.count]).toEqual([0, 0]);
    },
  );

  it('lets a first attempt whose record it does not keep claim without reading, and replays through the claim', async () => {
    const { store, reads, clock } = countedStore();
    await call(store, 'k'); // completed by another server: not kept here
    const cached = withLocalCache(store, { max: 10, clock });
    const before = reads.count;
    const replay = await call(cached, 'k', { firstAttempt: true });
    expect(replay).toMatchObject({ replayed: true, value: { paid: 'k' } });
    expect(reads.count).toBe(before);
  });

  it('remembers the lease claims of at most `max` calls, so a call that never completes is let go', async () => {
    const { store, clock } = countedStore();
    const cached = withLocalCache(store, { max: 2, clock });
    const owner = (key: string) => ({ scope: 'alice', key, ownerToken: `token-${key}` });
    for (const key of ['a', 'b', 'c']) {
      const claimed = await cached.lease.claim({
        ...owner(key),
        operation: 'pay',
        fingerprint: 'f',
        ttlMs: 60_000,
        leaseMs: 30_000,
      });
      expect(claimed.claimed).toBe(true);
    }
    const completion = { result: '1', resultIsError: false, ttlMs: 60_000 };
    for (const key of ['a', 'b']) await cached.lease.complete({ ...owner(key), ...completion });
    // a's claim went when c's came (two remembered): its record is completed, but not kept.
    expect(cached.findCached?.('alice', 'a')).toBeNull();
    expect(cached.findCached?.('alice', 'b')).toMatchObject({ status: 'COMPLETED', result: '1' });
  });

  it('refuses a bound that is not a positive integer', () => {
    const { store } = countedStore();
    expect(() => withLocalCache(store, { max: 0 })).toThrow(RangeError);
    expect(() => withLocalCache(store, { max: 1, maxBytes: 0 })).toThrow(RangeError);
  });
});
