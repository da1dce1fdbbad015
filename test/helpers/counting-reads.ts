import type { Store } from '../../src/index.js';

/**
 * `store`, counting the reads (`find`) that reach it; in-memory lookups are not reads. It shares
 * `store`'s backend, so calls through either wait for each other as in one process.
 */
export function countingReads<Tx>(store: Store<Tx>): { store: Store<Tx>; reads: { count: number } } {
  const reads = { count: 0 };
  const counted = Object.assign(Object.create(store) as Store<Tx>, {
    backend: store.backend ?? store,
    find(scope: string, key: string) {
      reads.count++;
      return store.find(scope, key);
    },
  });
  return { store: counted, reads };
}
