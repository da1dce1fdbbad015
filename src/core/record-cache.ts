import { heldKeys, readAlone } from './single-flight.js';
import {
  type ClaimRequest,
  type Completed,
  type LeaseOperations,
  type LeaseRequest,
  type Store,
  type StoredRecord,
  type TransactionSession,
  withOwnTimes,
} from './store.js';

/** Options of `withLocalCache`. */
export interface LocalCacheOptions {
  /** How many completed records to keep (least recently used go first). */
  max: number;
  /**
   * How much memory the kept records may take, estimated as two bytes per character of their
   * strings (the result first) plus a fixed overhead; least recently used go first, and a record
   * larger than this is not kept at all.
   * @default 16_777_216 (16 MiB)
   */
  maxBytes?: number;
  /** A monotonic clock in milliseconds. @default performance.now */
  clock?: (() => number) | undefined;
}

/**
 * Stores count time in whole milliseconds read off a finer clock (a database truncates its
 * microseconds), so a record may end up to a millisecond sooner than a duration counted from the
 * moment its write or read was sent says: an entry ends that much earlier.
 */
const STORE_CLOCK_STEP_MS = 1;

/** What one entry costs beyond its strings: the entry, the record object, its dates. */
const ENTRY_OVERHEAD_BYTES = 400;

/**
 * `store`, with completed records kept in this process's memory, so a replay that lands on the
 * same server costs no round trip. Safe because a completed record never changes before it
 * expires. The cache never outlives a record by the store's clock: a record read with
 * `liveForMs` left (measured by the store, a database in SQL) is kept until that long after the
 * read was *sent* (less a millisecond: stores keep whole milliseconds), on this process's
 * monotonic clock, so clock skew between servers and the database does not matter, and the cached
 * entry ends a little before the record does. A record this process completes is kept from its
 * commit on, until `ttlMs` after its completion was sent, less that millisecond (the store counts
 * its expiry from a moment no earlier, truncated). The core still checks the fingerprint
 * of every cached record. `findCached` reads the memory alone: a call hinted as a first attempt
 * (`firstAttempt`) sends no read to the store, yet a cached record still answers it for free.
 */
export function withLocalCache<Tx>(store: Store<Tx>, options: LocalCacheOptions): Store<Tx> {
  const { max, maxBytes = 16_777_216, clock = () => performance.now() } = options;
  if (!Number.isInteger(max) || max < 1) throw new RangeError('localCache.max must be a positive integer');
  if (!Number.isInteger(maxBytes) || maxBytes < 1) {
    throw new RangeError('localCache.maxBytes must be a positive integer');
  }
  const entries = new Map<string, { record: StoredRecord; until: number; bytes: number }>();
  let bytes = 0;
  const idOf = (scope: string, key: string) => `${scope}\u0000${key}`;
  const forget = (id: string) => {
    const entry = entries.get(id);
    if (!entry) return undefined;
    entries.delete(id);
    bytes -= entry.bytes;
    return entry;
  };
  const keep = (record: StoredRecord, until: number) => {
    const id = idOf(record.scope, record.key);
    forget(id);
    const size = sizeOf(record);
    if (size > maxBytes) return;
    // A copy: the record kept is never one its caller holds, nor one a hit hands out.
    entries.set(id, { record: withOwnTimes(record, record.liveForMs), until, bytes: size });
    bytes += size;
    // The first entries of a Map are its least recently used ones.
    for (const oldest of entries.keys()) {
      if (entries.size <= max && bytes <= maxBytes) break;
      forget(oldest);
    }
  };

  /** When an entry ends: `liveForMs` after `sent`, a store's clock step sooner. */
  const endOf = (sent: number, liveForMs: number) => sent + liveForMs - STORE_CLOCK_STEP_MS;

  const recall = (scope: string, key: string): StoredRecord | null => {
    const id = idOf(scope, key);
    const hit = forget(id);
    if (!hit) return null;
    const left = hit.until - clock();
    if (!(left > 0)) return null;
    // Most recently used: last again, as it was (the entry is already a copy of its own).
    entries.set(id, hit);
    bytes += hit.bytes;
    return withOwnTimes(hit.record, left);
  };

  const cached: Store<Tx> = Object.create(store);
  return Object.assign(cached, {
    findCached: recall,
    async find(scope: string, key: string): Promise<StoredRecord | null> {
      const hit = recall(scope, key);
      if (hit) return hit;
      const sent = clock();
      // Kept only from a read no call of this process holding the key overlapped (`readAlone`).
      const read = await readAlone(heldKeys(cached.backend ?? cached), idOf(scope, key), () =>
        store.find(scope, key),
      );
      const record = read.value;
      if (!read.overlapped && record?.status === 'COMPLETED' && record.liveForMs > 0)
        keep(record, endOf(sent, record.liveForMs));
      return record;
    },
    ...(store.transaction && {
      async transaction<T>(work: (session: TransactionSession<Tx>) => Promise<T>): Promise<T> {
        let completion: Promise<() => void> | undefined;
        const result = await store.transaction!((session) => {
          completion = undefined; // a new attempt after a write conflict
          return work(completing(session, (keepIt) => (completion = keepIt)));
        });
        (await completion)?.(); // committed
        return result;
      },
    }),
    lease: completingLease(store.lease),
  });

  /**
   * `session`, telling `completed` how to keep the record it completes once it commits (settled by
   * then: the transaction awaits its completion, or rejects when it failed).
   */
  function completing(session: TransactionSession<Tx>, completed: (keepIt: Promise<() => void>) => void) {
    let claimed: { request: ClaimRequest; firstSeenAt: Date } | undefined;
    return Object.assign(Object.create(session) as TransactionSession<Tx>, {
      async claim(request: ClaimRequest) {
        const outcome = await session.claim(request);
        if (outcome.claimed) claimed = { request, firstSeenAt: outcome.firstSeenAt };
        return outcome;
      },
      async takeOver(request: ClaimRequest) {
        const firstSeenAt = await session.takeOver(request);
        claimed = { request, firstSeenAt };
        return firstSeenAt;
      },
      complete(completion: Parameters<TransactionSession<Tx>['complete']>[0]) {
        const sent = clock();
        const done = session.complete(completion);
        const claim = claimed;
        if (claim) {
          const keepIt = done.then(
            (times) => () => keep(completedRecord(claim, completion, times), endOf(sent, completion.ttlMs)),
          );
          keepIt.catch(() => undefined); // the transaction reports the failure
          completed(keepIt);
        }
        return done;
      },
    });
  }

  /** The lease steps, keeping each record this process completes under its lease. */
  function completingLease(lease: LeaseOperations<Tx>): LeaseOperations<Tx> {
    const claims = new Map<string, { request: LeaseRequest; firstSeenAt: Date }>();
    return Object.assign(Object.create(lease) as LeaseOperations<Tx>, {
      async claim(request: LeaseRequest) {
        const outcome = await lease.claim(request);
        if (outcome.claimed) {
          claims.set(request.ownerToken, { request, firstSeenAt: outcome.firstSeenAt });
          // Only calls in flight need theirs. One whose call neither completes nor releases (a
          // lease ended to keep its steps, an error that could not be stored) goes once `max`
          // newer claims came: its record is then not kept, and nothing else is lost.
          for (const oldest of claims.keys()) {
            if (claims.size <= max) break;
            claims.delete(oldest);
          }
        }
        return outcome;
      },
      async complete(completion: Parameters<LeaseOperations<Tx>['complete']>[0]) {
        const claim = claims.get(completion.ownerToken);
        claims.delete(completion.ownerToken);
        const sent = clock();
        const done = await lease.complete(completion);
        if (done && claim) keep(completedRecord(claim, completion, done), endOf(sent, completion.ttlMs));
        return done;
      },
      release(owner: Parameters<LeaseOperations<Tx>['release']>[0]) {
        claims.delete(owner.ownerToken);
        return lease.release(owner);
      },
    });
  }
}

/** The record a completion leaves, as `find` would return it. */
function completedRecord(
  claim: { request: ClaimRequest; firstSeenAt: Date },
  completion: { result: string; resultIsError: boolean; ttlMs: number; ownerToken?: string },
  completed: Completed,
): StoredRecord {
  const { scope, key, operation, fingerprint } = claim.request;
  return {
    scope,
    key,
    operation,
    fingerprint,
    status: 'COMPLETED',
    result: completion.result,
    resultIsError: completion.resultIsError,
    ownerToken: completion.ownerToken ?? null, // a lease's stays on its completed record, as stored
    lockedUntil: null,
    createdAt: claim.firstSeenAt,
    completedAt: completed.completedAt,
    expiresAt: completed.expiresAt,
    liveForMs: completion.ttlMs,
  };
}

/** An estimate of a record's heap size: UTF-16 strings, plus the entry's own objects. */
function sizeOf(record: StoredRecord): number {
  const characters =
    (record.result?.length ?? 0) +
    record.scope.length +
    record.key.length +
    record.operation.length +
    record.fingerprint.length;
  return 2 * characters + ENTRY_OVERHEAD_BYTES;
}
