import { describe, it } from 'vitest';
import { memoryStore, withLocalCache } from '../../src/index.js';
import { expectOneInstantPerWrite, runStoreConformance } from '../helpers/store-conformance.js';

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
    await expectOneInstantPerWrite(store, 's');
  });
});
