import type { Store, StoredRecord } from './store.js';

/** Options of `withLocalCache`. */
export interface LocalCacheOptions {
  /** How many completed records to keep (least recently used go first). */
  max: number;
  /** A monotonic clock in milliseconds. @default performance.now */
  clock?: (() => number) | undefined;
}

/**
 * `store`, with completed records kept in this process's memory, so a replay that lands on the
 * same server costs no round trip. Safe because a completed record never changes before it
 * expires. The cache never outlives a record by the store's clock: a record read with
 * `liveForMs` left (measured by the store, a database in SQL) is kept until that long after the
 * read was *sent*, on this process's monotonic clock, so clock skew between servers and the
 * database does not matter, and the cached entry ends a little before the record does. The core
 * still checks the fingerprint of every cached record.
 */
export function withLocalCache<Tx>(store: Store<Tx>, options: LocalCacheOptions): Store<Tx> {
  const { max, clock = () => performance.now() } = options;
  if (!Number.isInteger(max) || max < 1) throw new RangeError('localCache.max must be a positive integer');
  const records = new Map<string, { record: StoredRecord; until: number }>();
  const cached: Store<Tx> = Object.create(store);
  return Object.assign(cached, {
    async find(scope: string, key: string): Promise<StoredRecord | null> {
      const id = `${scope}\u0000${key}`;
      const hit = records.get(id);
      if (hit) {
        records.delete(id);
        const left = hit.until - clock();
        if (left > 0) {
          records.set(id, hit); // most recently used
          return { ...hit.record, liveForMs: left };
        }
      }
      const sent = clock();
      const record = await store.find(scope, key);
      if (record?.status === 'COMPLETED' && record.liveForMs > 0) {
        records.set(id, { record, until: sent + record.liveForMs });
        if (records.size > max) records.delete(records.keys().next().value as string);
      }
      return record;
    },
  });
}
