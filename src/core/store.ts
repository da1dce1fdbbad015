import type { Serializer } from './serializer.js';
import { withMembers } from './with-members.js';

/**
 * A Date of its own at `date`'s time. What a store (or its cache) hands out is fresh, as a
 * database's read is: a caller that changes it changes nothing kept.
 */
export function dateCopy(date: Date): Date {
  return new Date(date.getTime());
}

/** `record` with `liveForMs`, each of its times a Date of its own (`dateCopy`). */
export function withOwnTimes(record: Omit<StoredRecord, 'liveForMs'>, liveForMs: number): StoredRecord {
  const { lockedUntil, createdAt, completedAt, expiresAt } = record;
  return withMembers(record, {
    lockedUntil: lockedUntil && dateCopy(lockedUntil),
    createdAt: dateCopy(createdAt),
    completedAt: completedAt && dateCopy(completedAt),
    expiresAt: dateCopy(expiresAt),
    liveForMs,
  });
}

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
  /**
   * How much longer the record answers for its key, in ms, by the store's own clock at the moment
   * it was read: a completed record until it expires, an `IN_PROGRESS` one while its lease runs.
   * Zero or less: the record is no longer live, and a claim may take it over (or the sweeper
   * delete it). Stores compute it against their clock (a database's, in SQL), never the caller's.
   */
  liveForMs: number;
}

/** What a request claims. Times are durations: the store adds them to its own clock. */
export interface ClaimRequest {
  scope: string;
  key: string;
  operation: string;
  fingerprint: string;
  /** How long the record stays, from the claim (and again from the completion). */
  ttlMs: number;
}

/** A lease-mode claim: a claim plus the token that fences it and the lease's length. */
export interface LeaseRequest extends ClaimRequest {
  /** A random token only the claiming request knows; every later step must present it. */
  ownerToken: string;
  leaseMs: number;
}

/**
 * The result of a claim: ours, from `firstSeenAt` by the store's clock (`tookOver` when it
 * replaced a record that was no longer live), or the record that was there.
 */
export type ClaimOutcome =
  | { claimed: true; firstSeenAt: Date; tookOver: boolean }
  | { claimed: false; existing: StoredRecord };

/** Who holds a lease. */
export interface LeaseOwner {
  scope: string;
  key: string;
  ownerToken: string;
}

/** How a claimed record is finished; it then stays `ttlMs` from now, by the store's clock. */
export interface Completion {
  scope: string;
  key: string;
  result: string;
  resultIsError: boolean;
  ttlMs: number;
}

/** When a completion was stored and until when it is replayed, by the store's clock. */
export interface Completed {
  completedAt: Date;
  expiresAt: Date;
}

/**
 * The contract's base: steps that each commit on their own. Every step after the claim applies
 * only while the record is still `IN_PROGRESS` under the caller's owner token (fencing): a request
 * never changes or deletes a claim it does not own.
 */
export interface LeaseOperations<Tx> {
  /** What the resolver receives as `tx` in lease mode: a client outside any transaction. */
  readonly client: Tx;
  /**
   * Inserts an `IN_PROGRESS` record locked for `leaseMs` if the key is free, or atomically takes
   * over a record that is no longer live; otherwise returns the live record. Throws
   * `IdempotencyKeyInProgressError` when the database stopped waiting for a transaction that holds
   * the key (a transactional call on the same key, under a lock or statement timeout): nothing was
   * written.
   */
  claim(request: LeaseRequest): Promise<ClaimOutcome>;
  /** Moves the lease's end to `leaseMs` from now; `false` when the lease is no longer the caller's. */
  extend(owner: LeaseOwner, leaseMs: number): Promise<boolean>;
  /** Stores the result; `null` (nothing written) when the lease is no longer the caller's. */
  complete(completion: Completion & LeaseOwner): Promise<Completed | null>;
  /** Deletes the claim so the key can be retried; `false` when it is no longer the caller's. */
  release(owner: LeaseOwner): Promise<boolean>;
}

/** Transactional mode's steps, all inside one transaction of the store. */
export interface TransactionSession<Tx> {
  /** The transaction client handed to the resolver, so its writes commit with the record. */
  readonly tx: Tx;
  /**
   * Inserts an `IN_PROGRESS` record atomically (no read-then-insert window). When the key exists,
   * waits for whichever transaction holds it and returns the committed record, locked until this
   * transaction ends; the caller decides (`decide`) whether to replay it or take it over. Throws
   * `IdempotencyKeyInProgressError` when the database stopped waiting for that transaction first
   * (a lock or statement timeout): nothing was written, and the caller answers as when its own wait
   * runs out.
   */
  claim(request: ClaimRequest): Promise<ClaimOutcome>;
  /** Replaces a record that `claim` returned and locked (no longer live); returns `firstSeenAt`. */
  takeOver(request: ClaimRequest): Promise<Date>;
  /** Stores the result of the claimed record. */
  complete(completion: Completion): Promise<Completed>;
  /**
   * Marks where the resolver's writes begin, once the key is claimed (a savepoint), and returns the
   * way back to the mark for the resolver's replayable `error`: it undoes the resolver's writes and
   * keeps the claim, and its lock, so that the error is stored by `complete` in this same
   * transaction and a duplicate waiting for the key replays it. The way back answers `false`, and
   * goes nowhere, for an error the store answers itself (a write conflict it runs the transaction
   * again for, a lost connection): the transaction then fails with it, as with any error. Taken only
   * for calls with `replayErrors`. Optional: without it, a replayable error is stored by a
   * transaction of its own after the rollback, and a duplicate waiting for the key can claim it in
   * between and run.
   */
  savepoint?(): Promise<(error: unknown) => Promise<boolean>>;
  /**
   * Whether `work` may resolve without awaiting `complete`: the store then sends the completion
   * ahead of its commit (one round trip fewer), and `transaction` rejects, with nothing committed,
   * when the completion fails. The store must make sure of three things: `complete` has handed its
   * statement to the connection before it returns, so the commit follows it; the statement fails
   * in the database itself when it stores nothing (a check in code after it would come too late);
   * and the database rolls the whole transaction back after a failed statement (PostgreSQL does;
   * MySQL/MariaDB and SQLite commit what ran). A session wrapped so that `complete` can fail on its
   * own, or sends its statement later, must say `false`.
   * @default false: `work` awaits `complete` before it resolves
   */
  readonly completesWithCommit?: boolean;
}

/** One step of a lease-mode call, as a store keeps it under `(scope, key, name)`. */
export interface StepRecord {
  name: string;
  /**
   * Where the step ran in its call: 0 for the first. Positions may skip: a step whose `fn` failed
   * (its error caught by the resolver) stored nothing, and the next one keeps its own position.
   */
  position: number;
  /** The fingerprint of the call that ran it. */
  fingerprint: string;
  /** The serialized result (or replayable error). */
  result: string;
  resultIsError: boolean;
  completedAt: Date;
  /**
   * How much longer the step may be replayed, in ms by the store's clock at the moment it was
   * read: until its record expires (as it was when the step was stored, or when a takeover kept
   * it); zero or less: it belongs to a call whose record expired.
   */
  liveForMs: number;
}

/** A step's outcome to store, fenced by the lease's owner token. */
export interface StepWrite extends LeaseOwner {
  name: string;
  position: number;
  fingerprint: string;
  result: string;
  resultIsError: boolean;
}

/** A transactional step's transaction: the client `fn` writes through, and the step's own write. */
export interface StepSession<Tx> {
  readonly tx: Tx;
  /** Stores the step in this transaction; `false` (nothing written) when the lease is no longer the caller's. */
  save(step: StepWrite): Promise<boolean>;
}

/**
 * Durable steps of lease-mode calls (`step(name, fn)`), kept beside the call's record and deleted
 * with it. Every write is fenced like the lease's own: it applies only while the record is
 * `IN_PROGRESS` under the caller's owner token.
 */
export interface StepOperations<Tx> {
  /** The steps stored under the key, in the order they ran, with their liveness by the store's clock. */
  list(scope: string, key: string): Promise<StepRecord[]>;
  /**
   * Stores a completed step to expire when its record does (the record's expiry, not a time of
   * the step's own: a step never outlives its record, swept or not); `false` (nothing written)
   * when the lease is no longer the caller's.
   */
  save(step: StepWrite): Promise<boolean>;
  /** Deletes the key's steps (left by an earlier call of the key), only for the lease's owner. */
  clear(owner: LeaseOwner): Promise<void>;
  /**
   * Makes the key's steps that were live when the owner took the record over (by the record's
   * `createdAt`, however long ago) expire when the record does, only for the lease's owner: a call
   * that took the key over resumes them, and its record now expires later, so they must not expire
   * first (a later takeover would find them gone and run them again).
   * @default none: a store whose steps never expire before their record needs none
   */
  keep?(owner: LeaseOwner): Promise<void>;
  /**
   * Runs `work` in one transaction of the store, committing when it resolves and rolling back when
   * it throws: the step's record and `work`'s writes through `session.tx` commit together.
   */
  transaction<T>(work: (session: StepSession<Tx>) => Promise<T>): Promise<T>;
}

/**
 * How `runIdempotent` runs with a store when the call does not say: lets a whole store (and every
 * integration using it) default to lease mode.
 */
export interface ModeDefaults {
  /** @default 'transactional' */
  mode?: 'transactional' | 'lease' | undefined;
  /** @default 30_000 */
  leaseMs?: number | undefined;
  /** @default undefined (no heartbeat) */
  heartbeatMs?: number | undefined;
}

/**
 * Where records live. A store only does I/O: `runIdempotent` decides. Any store implements the
 * lease steps and `find`; a store that can run the resolver's own writes in one transaction with
 * the record (a database) adds `transaction`, which transactional mode needs. `memoryStore` and
 * `prismaStore` implement both, and `test/store-conformance` specifies the behaviour every store
 * must show.
 */
export interface Store<Tx = unknown> {
  /** The serializer this store's results need (the Prisma store knows Prisma's Decimal). */
  readonly serializer?: Serializer;
  /** Reads a record without locking it, with its liveness by the store's clock. */
  find(scope: string, key: string): Promise<StoredRecord | null>;
  /**
   * The completed record this process keeps in memory (`withLocalCache`), read without any I/O;
   * `null` when it keeps none. A call hinted as a first attempt reads only this, not `find`.
   */
  findCached?(scope: string, key: string): StoredRecord | null;
  /** The lease-mode steps: the base every store implements. */
  readonly lease: LeaseOperations<Tx>;
  /**
   * Transactional mode (a capability): runs `work` in one transaction, committing when it resolves
   * and rolling everything back when it throws. Retries write conflicts a bounded number of times;
   * an unreachable database surfaces as `IDEMPOTENCY_STORE_UNAVAILABLE`.
   */
  transaction?<T>(work: (session: TransactionSession<Tx>) => Promise<T>): Promise<T>;
  /** Durable steps of lease-mode calls (a capability `step(name, fn)` needs). */
  readonly steps?: StepOperations<Tx>;
  /** The mode (and lease) calls use unless they name their own. */
  readonly defaults?: ModeDefaults;
  /**
   * What holds the records (the Prisma store gives one object per client and records table).
   * Duplicates in one process wait for the call holding their key per backend, so stores over one
   * client and one table see each other's calls.
   * @default the store itself
   */
  readonly backend?: object;
}
