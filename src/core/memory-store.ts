import type { Serializer } from './serializer.js';
import {
  isLive,
  type LeaseOwner,
  type ModeDefaults,
  type NewClaim,
  type Store,
  type StoredRecord,
} from './store.js';

/** Options of `memoryStore`; `mode`, `leaseMs` and `heartbeatMs` are defaults for the calls using it. */
export interface MemoryStoreOptions extends ModeDefaults {
  /** Overrides the default superjson serializer (e.g. to pass a `Decimal` class). */
  serializer?: Serializer;
}

/**
 * A store in this process's memory, for unit tests and single-process development. It behaves as
 * the database does: a transaction's claim is invisible to others until it commits, and a second
 * claim of the same key waits for the first transaction to end; lease-mode steps commit at once.
 * Records do not survive a restart.
 */
export function memoryStore(options: MemoryStoreOptions = {}): Store<undefined> {
  const records = new Map<string, StoredRecord>();
  const locks = new Map<string, Promise<void>>();

  /** Waits for the key's previous holder, then holds it until the returned release is called. */
  async function lock(id: string): Promise<() => void> {
    const previous = locks.get(id) ?? Promise.resolve();
    let release!: () => void;
    const current = previous.then(() => new Promise<void>((resolve) => (release = resolve)));
    locks.set(id, current);
    await previous;
    return () => {
      release();
      if (locks.get(id) === current) locks.delete(id);
    };
  }

  /**
   * Runs `step` on the record if it is still `IN_PROGRESS` under `owner`'s token, once no
   * transaction holds the key (one that took it over must have committed, as in the database).
   */
  async function whileOwned(owner: LeaseOwner, step: (record: StoredRecord) => void): Promise<boolean> {
    const id = idOf(owner.scope, owner.key);
    const unlock = await lock(id);
    try {
      const record = records.get(id);
      if (record?.status !== 'IN_PROGRESS' || record.ownerToken !== owner.ownerToken) return false;
      step(record);
      return true;
    } finally {
      unlock();
    }
  }

  return {
    serializer: options.serializer,
    defaults: { mode: options.mode, leaseMs: options.leaseMs, heartbeatMs: options.heartbeatMs },

    async find(scope, key) {
      const record = records.get(idOf(scope, key));
      return record ? { ...record } : null;
    },

    async transaction(work) {
      const held: Promise<() => void>[] = [];
      const staged = new Map<string, StoredRecord>();
      const stagedRecord = (scope: string, key: string) => {
        const record = staged.get(idOf(scope, key));
        if (!record) throw new Error(`No claim of (${scope}, ${key}) in this transaction`);
        return record;
      };
      try {
        const value = await work({
          tx: undefined,
          async claim(claim) {
            const id = idOf(claim.scope, claim.key);
            const acquiring = lock(id);
            held.push(acquiring);
            await acquiring;
            const existing = records.get(id);
            if (existing) return { claimed: false, existing: { ...existing } };
            staged.set(id, inProgress(claim));
            return { claimed: true };
          },
          async takeOver(claim) {
            staged.set(idOf(claim.scope, claim.key), inProgress(claim));
          },
          async complete(completion) {
            const record = stagedRecord(completion.scope, completion.key);
            Object.assign(record, {
              status: 'COMPLETED',
              result: completion.result,
              resultIsError: completion.resultIsError,
              completedAt: completion.completedAt,
              expiresAt: completion.expiresAt,
            });
          },
        });
        for (const [id, record] of staged) records.set(id, record);
        return value;
      } finally {
        // A claim abandoned mid-wait (timeout) still gets its lock; release it once it does.
        for (const acquiring of held) void acquiring.then((release) => release());
      }
    },

    lease: {
      client: undefined,
      async claim(claim) {
        const id = idOf(claim.scope, claim.key);
        // Like the database's insert, this waits for a transaction that holds the key.
        const unlock = await lock(id);
        try {
          const existing = records.get(id);
          if (existing && isLive(existing, claim.now)) return { claimed: false, existing: { ...existing } };
          records.set(id, {
            ...inProgress(claim),
            ownerToken: claim.ownerToken,
            lockedUntil: claim.lockedUntil,
          });
          return { claimed: true, tookOver: existing !== undefined };
        } finally {
          unlock();
        }
      },
      extend: (owner, lockedUntil) =>
        whileOwned(owner, (record) => {
          record.lockedUntil = lockedUntil;
        }),
      complete: (completion) =>
        whileOwned(completion, (record) => {
          Object.assign(record, {
            status: 'COMPLETED',
            result: completion.result,
            resultIsError: completion.resultIsError,
            lockedUntil: null,
            completedAt: completion.completedAt,
            expiresAt: completion.expiresAt,
          });
        }),
      release: (owner) =>
        whileOwned(owner, () => {
          records.delete(idOf(owner.scope, owner.key));
        }),
    },
  };
}

function idOf(scope: string, key: string): string {
  return `${scope}\u0000${key}`;
}

function inProgress(claim: NewClaim): StoredRecord {
  return {
    scope: claim.scope,
    key: claim.key,
    operation: claim.operation,
    fingerprint: claim.fingerprint,
    status: 'IN_PROGRESS',
    result: null,
    resultIsError: false,
    ownerToken: null,
    lockedUntil: null,
    createdAt: claim.now,
    completedAt: null,
    expiresAt: claim.expiresAt,
  };
}
