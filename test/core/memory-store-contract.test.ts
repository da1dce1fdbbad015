import { describe, expect, it } from 'vitest';
import { memoryStore, withLocalCache } from '../../src/index.js';
import { runStoreConformance } from '../helpers/store-conformance.js';

/** The memory store's clock: independent of `Date`, which the suite skews to play other servers. */
function storeClock() {
  let offset = 0;
  return {
    now: () => performance.timeOrigin + performance.now() + offset,
    travel: async (_scope: string, ms: number) => {
      offset += ms;
    },
  };
}

const plain = storeClock();
const plainStore = memoryStore({ clock: plain.now });
runStoreConformance('memoryStore', () => ({ store: () => plainStore, travel: plain.travel }));

// The local cache decorates any store and must keep every promise of the one beneath it: its
// entries end by the store's clock (the memory store's, moved here without the cache knowing).
const cached = storeClock();
const cachedStore = withLocalCache(memoryStore({ clock: cached.now }), { max: 100, clock: cached.now });
runStoreConformance('withLocalCache(memoryStore)', () => ({
  store: () => cachedStore,
  travel: cached.travel,
}));

describe('memoryStore', () => {
  it('reads its clock once per write, as a statement has one now(): a clock that moves between readings dates every field alike', async () => {
    let now = 1_000_000;
    const store = memoryStore({ clock: () => (now += 1) });
    const owner = { scope: 's', key: 'k', ownerToken: 'a'.repeat(64) };
    const claim = { ...owner, operation: 'op', fingerprint: 'f'.repeat(64), ttlMs: 60_000, leaseMs: 4_000 };
    await store.lease.claim(claim);
    const held = (await store.find('s', 'k'))!;
    expect(held.lockedUntil!.getTime() - held.createdAt.getTime()).toBe(4_000);
    expect(held.expiresAt.getTime() - held.createdAt.getTime()).toBe(60_000);
    const completed = await store.lease.complete({
      ...owner,
      result: '"1"',
      resultIsError: false,
      ttlMs: 90_000,
    });
    expect(completed!.expiresAt.getTime() - completed!.completedAt.getTime()).toBe(90_000);
  });
});
