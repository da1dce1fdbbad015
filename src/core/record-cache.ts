import type { StoredRecord } from './store.js';

/**
 * An in-process LRU of completed records, so a replay that lands on the same server costs no
 * database round trip. Safe because a completed record never changes before it expires; the core
 * still checks expiry and the fingerprint of every cached record.
 */
export class RecordCache {
  readonly #max: number;
  readonly #records = new Map<string, StoredRecord>();

  constructor(max: number) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError('localCache.max must be a positive integer');
    this.#max = max;
  }

  get(scope: string, key: string): StoredRecord | undefined {
    const id = `${scope}\u0000${key}`;
    const record = this.#records.get(id);
    if (!record) return undefined;
    if (record.expiresAt.getTime() <= Date.now()) {
      this.#records.delete(id);
      return undefined;
    }
    // Re-insert to mark it most recently used.
    this.#records.delete(id);
    this.#records.set(id, record);
    return record;
  }

  /** Keeps `record` if it is completed; anything else may still change. */
  remember(record: StoredRecord): void {
    if (record.status !== 'COMPLETED') return;
    const id = `${record.scope}\u0000${record.key}`;
    this.#records.delete(id);
    this.#records.set(id, record);
    if (this.#records.size > this.#max) {
      this.#records.delete(this.#records.keys().next().value as string);
    }
  }
}
