import type { Serializer } from './serializer.js';

/** `IN_PROGRESS` while a request holds the key, `COMPLETED` once its result is stored. */
export type RecordStatus = 'IN_PROGRESS' | 'COMPLETED';

/** One idempotency record, as every store keeps it under `(scope, key)`. */
export interface StoredRecord {
  scope: string;
  key: string;
  operation: string;
  fingerprint: string;
  status: RecordStatus;
  /** The serialized result (or error), once completed. */
  result: string | null;
  resultIsError: boolean;
  /** Lease mode: who holds the claim, and until when. */
  ownerToken: string | null;
  lockedUntil: Date | null;
  createdAt: Date;
  completedAt: Date | null;
  expiresAt: Date;
}

/** What a request asks to claim. */
export interface NewClaim {
  scope: string;
  key: string;
  operation: string;
  fingerprint: string;
  now: Date;
  expiresAt: Date;
}

/** The result of a claim: ours, or the record that was there first (committed, and locked for us). */
export type ClaimOutcome = { claimed: true } | { claimed: false; existing: StoredRecord };

/** How a claimed record is finished. */
export interface Completion {
  scope: string;
  key: string;
  result: string;
  resultIsError: boolean;
  completedAt: Date;
  expiresAt: Date;
}

/** The steps of transactional mode, all inside one database transaction. */
export interface TransactionSession<Tx> {
  /** The transaction client handed to the resolver, so its writes commit with the record. */
  readonly tx: Tx;
  /**
   * Inserts an `IN_PROGRESS` record atomically (no read-then-insert window). When the key exists,
   * waits for whichever transaction holds it and returns the committed record, locked until this
   * transaction ends.
   */
  claim(claim: NewClaim): Promise<ClaimOutcome>;
  /** Replaces an expired (or abandoned) record that `claim` returned and locked. */
  takeOver(claim: NewClaim): Promise<void>;
  /** Stores the result of the claimed record. */
  complete(completion: Completion): Promise<void>;
}

/** What a lease-mode request claims: a claim plus the token that fences it and the lease's end. */
export interface LeaseClaim extends NewClaim {
  /** A random token only the claiming request knows; every later step must present it. */
  ownerToken: string;
  lockedUntil: Date;
}

/**
 * The result of a lease claim: ours (`tookOver` when it replaced an expired record or a lease that
 * ran out), or the live record that is there.
 */
export type LeaseClaimOutcome =
  | { claimed: true; tookOver: boolean }
  | { claimed: false; existing: StoredRecord };

/** Who holds a lease. */
export interface LeaseOwner {
  scope: string;
  key: string;
  ownerToken: string;
}

/**
 * The steps of lease mode. Each one is a short statement that commits on its own, and every step
 * after the claim applies only while the record is still `IN_PROGRESS` under the caller's owner
 * token (fencing): a request never changes or deletes a claim it does not own.
 */
export interface LeaseOperations<Tx> {
  /** What the resolver receives as `tx` in lease mode: a client outside any transaction. */
  readonly client: Tx;
  /**
   * Inserts an `IN_PROGRESS` record if the key is free, or atomically takes over a record that is
   * not live (`isLive`); otherwise returns the live record.
   */
  claim(claim: LeaseClaim): Promise<LeaseClaimOutcome>;
  /** Moves the lease's end; `false` when the lease is no longer the caller's. */
  extend(owner: LeaseOwner, lockedUntil: Date): Promise<boolean>;
  /** Stores the result; `false` (nothing written) when the lease is no longer the caller's. */
  complete(completion: Completion & LeaseOwner): Promise<boolean>;
  /** Deletes the claim so the key can be retried; `false` when it is no longer the caller's. */
  release(owner: LeaseOwner): Promise<boolean>;
}

/**
 * Whether a record still answers for its key: a completed record until it expires, an
 * `IN_PROGRESS` one while its lease runs. Anything else may be taken over or swept. Every store's
 * conditions (claims, takeovers, the sweeper) agree with this.
 */
export function isLive(record: StoredRecord, now: Date): boolean {
  if (record.status === 'IN_PROGRESS') return record.lockedUntil !== null && record.lockedUntil > now;
  return record.expiresAt > now;
}

/**
 * How `runIdempotent` runs with a store when the call does not say: lets a whole store (and every
 * integration using it) default to lease mode.
 */
export interface ModeDefaults {
  /** @default 'transactional' */
  mode?: 'transactional' | 'lease';
  /** @default 30_000 */
  leaseMs?: number;
  /** @default undefined (no heartbeat) */
  heartbeatMs?: number;
}

/** Options of one transaction, passed through to the store. */
export interface TransactionRequest {
  /** Aborts waiting for a connection or a lock. */
  signal?: AbortSignal;
}

/**
 * Where records live. `prismaStore` is the real one; `memoryStore` serves unit tests and
 * single-process development. A store decides nothing: `runIdempotent` does.
 */
export interface Store<Tx = unknown> {
  /** The serializer this store's results need (the Prisma store knows Prisma's Decimal). */
  readonly serializer?: Serializer;
  /** Reads a record without locking it: the replay fast path, outside any transaction. */
  find(scope: string, key: string): Promise<StoredRecord | null>;
  /**
   * Runs `work` in one transaction: commits when it resolves, rolls everything back when it
   * throws. Retries serialization failures a bounded number of times; an unreachable database
   * surfaces as `IDEMPOTENCY_STORE_UNAVAILABLE`.
   */
  transaction<T>(
    work: (session: TransactionSession<Tx>) => Promise<T>,
    request?: TransactionRequest,
  ): Promise<T>;
  /** Lease mode's steps; a store without them supports transactional mode only. */
  readonly lease?: LeaseOperations<Tx>;
  /** The mode (and lease) calls use unless they name their own. */
  readonly defaults?: ModeDefaults;
  /**
   * What holds the records (the Prisma store gives its client). Duplicates in one process wait
   * for the call holding their key per backend, so stores over one client see each other's calls.
   * @default the store itself
   */
  readonly backend?: object;
}
