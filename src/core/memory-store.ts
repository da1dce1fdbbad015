import type { Serializer } from './serializer.js';
import {
  type ClaimRequest,
  dateCopy,
  type LeaseOwner,
  type ModeDefaults,
  type StepOperations,
  type StepRecord,
  type StepWrite,
  type Store,
  type StoredRecord,
  withOwnTimes,
} from './store.js';

/** Options of `memoryStore`; `mode`, `leaseMs` and `heartbeatMs` are defaults for the calls using it. */
export interface MemoryStoreOptions extends ModeDefaults {
  /** Overrides the default superjson serializer (e.g. to pass a `Decimal` class). */
  serializer?: Serializer | undefined;
  /**
   * The store's clock, in epoch milliseconds: what expiry and leases are decided against (as a
   * database decides them against its own). Tests inject one to move time without sleeping.
   * @default Date.now
   */
  clock?: (() => number) | undefined;
}

/**
 * A record as the memory store keeps it, times on its clock. Every time it hands out is a Date of
 * its own (`dateCopy`), as a database's read is: a caller that changes one changes no record.
 */
interface Kept extends Omit<StoredRecord, 'liveForMs'> {}

/** A step as the memory store keeps it: with the time it stops being replayable. */
interface KeptStep extends Omit<StepRecord, 'liveForMs'> {
  expiresAt: Date;
}

/**
 * A store in this process's memory, for unit tests and single-process development. It behaves as
 * the database does: a transaction's claim is invisible to others until it commits, and a second
 * claim of the same key waits for the first transaction to end; lease-mode steps commit at once.
 * Records do not survive a restart.
 */
export function memoryStore(options: MemoryStoreOptions = {}): Store<undefined> {
  const clock = options.clock ?? Date.now;
  const records = new Map<string, Kept>();
  const locks = new Map<string, Promise<void>>();
  /** Each key's steps, in the order they ran; deleted with the key's record. */
  const steps = new Map<string, KeptStep[]>();

  /** The record as read now, with its liveness by this store's clock. */
  const read = (record: Kept, now = clock()): StoredRecord => {
    const end = record.status === 'COMPLETED' ? record.expiresAt : record.lockedUntil;
    return withOwnTimes(record, end === null ? 0 : end.getTime() - now);
  };
  /** `ms` after `now`: one reading of the clock per write, as a statement has one `now()`. */
  const after = (ms: number, now = clock()) => new Date(now + ms);

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
  async function whileOwned<T>(owner: LeaseOwner, step: (record: Kept) => T): Promise<T | null> {
    const id = idOf(owner.scope, owner.key);
    const unlock = await lock(id);
    try {
      const record = records.get(id);
      if (record?.status !== 'IN_PROGRESS' || record.ownerToken !== owner.ownerToken) return null;
      return step(record);
    } finally {
      unlock();
    }
  }

  const inProgress = (claim: ClaimRequest, now = clock()): Kept => ({
    scope: claim.scope,
    key: claim.key,
    operation: claim.operation,
    fingerprint: claim.fingerprint,
    status: 'IN_PROGRESS',
    result: null,
    resultIsError: false,
    ownerToken: null,
    lockedUntil: null,
    createdAt: after(0, now),
    completedAt: null,
    expiresAt: after(claim.ttlMs, now),
  });
  const completed = (record: Kept, result: string, resultIsError: boolean, ttlMs: number) => {
    const now = clock();
    const times = { completedAt: after(0, now), expiresAt: after(ttlMs, now) };
    Object.assign(record, { status: 'COMPLETED', result, resultIsError, lockedUntil: null, ...times });
    return { completedAt: dateCopy(times.completedAt), expiresAt: dateCopy(times.expiresAt) };
  };

  return {
    serializer: options.serializer,
    defaults: { mode: options.mode, leaseMs: options.leaseMs, heartbeatMs: options.heartbeatMs },

    async find(scope, key) {
      const record = records.get(idOf(scope, key));
      return record ? read(record) : null;
    },

    async transaction(work) {
      const held: Promise<() => void>[] = [];
      const staged = new Map<string, Kept>();
      const stagedRecord = (scope: string, key: string) => {
        const record = staged.get(idOf(scope, key));
        if (!record) throw new Error('No claim of this key in this transaction');
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
            if (existing) return { claimed: false, existing: read(existing) };
            const record = inProgress(claim);
            staged.set(id, record);
            return { claimed: true, firstSeenAt: dateCopy(record.createdAt), tookOver: false };
          },
          async takeOver(claim) {
            const record = inProgress(claim);
            staged.set(idOf(claim.scope, claim.key), record);
            return dateCopy(record.createdAt);
          },
          async complete({ scope, key, result, resultIsError, ttlMs }) {
            return completed(stagedRecord(scope, key), result, resultIsError, ttlMs);
          },
          async savepoint() {
            const marked = [...staged].map(([id, record]) => [id, { ...record }] as const);
            return async () => {
              staged.clear();
              for (const [id, record] of marked) staged.set(id, { ...record });
              return true;
            };
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
          const now = clock();
          const seen = existing && read(existing, now);
          if (seen && seen.liveForMs > 0) return { claimed: false, existing: seen };
          const record = {
            ...inProgress(claim, now),
            ownerToken: claim.ownerToken,
            lockedUntil: after(claim.leaseMs, now),
          };
          records.set(id, record);
          return { claimed: true, firstSeenAt: dateCopy(record.createdAt), tookOver: existing !== undefined };
        } finally {
          unlock();
        }
      },
      extend: async (owner, leaseMs) =>
        (await whileOwned(owner, (record) => {
          record.lockedUntil = after(leaseMs);
        })) !== null,
      complete: (completion) =>
        whileOwned(completion, (record) =>
          completed(record, completion.result, completion.resultIsError, completion.ttlMs),
        ),
      release: async (owner) =>
        (await whileOwned(owner, () => {
          records.delete(idOf(owner.scope, owner.key));
          steps.delete(idOf(owner.scope, owner.key));
        })) !== null,
    },

    steps: stepOperations(),
  };

  function stepOperations(): StepOperations<undefined> {
    const append = (step: StepWrite, record: Kept) => {
      const id = idOf(step.scope, step.key);
      const kept = steps.get(id) ?? [];
      if (kept.some((other) => other.name === step.name)) {
        throw new Error(
          `The step ${JSON.stringify(step.name)} of (${step.scope}, ${step.key}) is already stored`,
        );
      }
      const { name, position, fingerprint, result, resultIsError } = step;
      const now = clock();
      const stored: KeptStep = {
        ...{ name, position, fingerprint, result, resultIsError },
        completedAt: after(0, now),
        expiresAt: new Date(record.expiresAt), // a step expires with its record
      };
      kept.push(stored);
      steps.set(id, kept);
      return () =>
        steps.set(
          id,
          kept.filter((other) => other !== stored),
        );
    };
    return {
      async list(scope, key) {
        return (steps.get(idOf(scope, key)) ?? [])
          .map(({ expiresAt, completedAt, ...step }) => ({
            ...step,
            completedAt: dateCopy(completedAt),
            liveForMs: expiresAt.getTime() - clock(),
          }))
          .sort((a, b) => a.position - b.position);
      },
      save: async (step) => (await whileOwned(step, (record) => append(step, record))) !== null,
      async clear(owner) {
        await whileOwned(owner, () => steps.delete(idOf(owner.scope, owner.key)));
      },
      async keep(owner) {
        await whileOwned(owner, (record) => {
          // Live at the takeover (the record's `createdAt`), however long ago that was.
          const takenOverAt = record.createdAt.getTime();
          for (const step of steps.get(idOf(owner.scope, owner.key)) ?? []) {
            if (step.expiresAt.getTime() > takenOverAt) step.expiresAt = new Date(record.expiresAt);
          }
        });
      },
      async transaction(work) {
        // No transaction client here: what `work` stores is undone if it throws afterwards.
        const undo: (() => void)[] = [];
        try {
          return await work({
            tx: undefined,
            save: async (step) => {
              const undone = await whileOwned(step, (record) => append(step, record));
              if (undone) undo.push(undone);
              return undone !== null;
            },
          });
        } catch (error) {
          for (const undone of undo) undone();
          throw error;
        }
      },
    };
  }
}

function idOf(scope: string, key: string): string {
  return `${scope}\u0000${key}`;
}
