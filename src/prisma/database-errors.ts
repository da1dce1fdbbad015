import {
  IdempotencyOutcomeUnknownError,
  IdempotencyStoreUnavailableError,
  IdempotencyTransactionExpiredError,
  isIdempotencyError,
} from '../core/errors.js';
import type { PrismaClientLike, PrismaQueryable, PrismaTransactionOptions, Provider } from './client.js';
import { DirectStatementError, TransactionClosedError } from './direct-statements.js';

/**
 * An error and what it wraps, depth first: Prisma puts a driver adapter's error under
 * `meta.driverAdapterError` and the database's own under that one's `cause`; wrappers keep theirs
 * as `cause`, a GraphQL error as `originalError`, an aggregate (a GraphQL operation that failed
 * with several errors) in `errors`.
 */
function* chainOf(
  error: unknown,
  depth = 0,
  leaf?: (node: object) => boolean,
): Generator<Record<string, unknown>> {
  if (!error || typeof error !== 'object' || depth > 6) return;
  const node = error as Record<string, unknown>;
  yield node;
  if (leaf?.(node)) return;
  const { meta, cause, originalError, errors } = node as {
    meta?: { driverAdapterError?: unknown };
    cause?: unknown;
    originalError?: unknown;
    errors?: unknown;
  };
  const wrapped = [
    meta?.driverAdapterError,
    cause,
    originalError,
    ...(Array.isArray(errors) ? errors.slice(0, 10) : []),
  ];
  for (const inner of wrapped) if (inner !== node) yield* chainOf(inner, depth + 1, leaf);
}

/** An error of Prisma's client or of a driver adapter beneath it (`directStatements`' included). */
export function isPrismaError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (error instanceof DirectStatementError) return true;
  const { clientVersion } = error as { clientVersion?: unknown };
  return typeof clientVersion === 'string' || error.name === 'DriverAdapterError';
}

/**
 * Whether Prisma or a driver adapter raised `error` or anything it wraps (a `TRPCError`, a
 * resolver's own error with the database's as `cause`). A resolver's error with no database error
 * inside (a payment gateway's `fetch failed`, even one caused by `ECONNREFUSED`) is not the store's.
 */
export function isDatabaseError(error: unknown): boolean {
  return databaseErrorIn(error) !== undefined;
}

/**
 * The first error of Prisma or of a driver adapter in what `error` wraps (itself included). Only
 * that error and what it wraps say what happened to the database: a sibling in the same aggregate
 * (another GraphQL field's gateway error caused by `ECONNRESET`) is not the database's. Nor is
 * what an error of this library wraps: it says what happened itself, and a resolver that throws
 * one got it from another call (a nested `IDEMPOTENCY_OUTCOME_UNKNOWN` whose store lost its
 * connection), whose database failure this transaction's answer must not take for its own.
 */
export function databaseErrorIn(error: unknown): unknown {
  for (const node of chainOf(error, 0, isIdempotencyError)) if (isPrismaError(node)) return node;
  return undefined;
}

/**
 * What a failed database call means for the transaction it ran in:
 * - `writeConflict`: a write conflict, deadlock or serialization failure (Prisma `P2034`, `P2010`
 *   with SQLSTATE `40001`/`40P01`, MySQL 1213 including Galera's certification failures). The
 *   transaction rolled back; running it again usually succeeds.
 * - `busy`: SQLite's lock is held by another connection (`SQLITE_BUSY`). Nothing ran; wait and
 *   run it again.
 * - `expired`: Prisma's interactive transaction outlived its `timeout` (`P2028`) and was rolled back.
 * - `connection`: the database could not be reached, the connection broke (a restart, a killed
 *   server or backend, a failover) or no connection could be had in time. A transaction it
 *   happened in rolled back, or, lost at `COMMIT`, may have committed in full.
 * - `undefined`: anything else (a constraint, a syntax error, the resolver's own error).
 */
export type DatabaseFailure = 'writeConflict' | 'busy' | 'expired' | 'connection';

/** Classifies `error` (see `DatabaseFailure`), looking through the errors it wraps. */
export function classify(error: unknown): DatabaseFailure | undefined {
  if (isExpiredTransaction(error)) return 'expired';
  if (isWriteConflict(error)) return 'writeConflict';
  if (isBusy(error)) return 'busy';
  if (isConnectionError(error)) return 'connection';
  return undefined;
}

/** A write conflict, deadlock or serialization failure: worth running the transaction again. */
export function isWriteConflict(error: unknown): boolean {
  for (const node of chainOf(error)) {
    const { code, kind } = node;
    if (code === 'P2034' || kind === 'TransactionWriteConflict') return true;
    // CockroachDB's retry errors are 40001 too.
    const databaseCode = databaseCodeOf(node);
    // PostgreSQL (and CockroachDB) serialization failure / deadlock; MySQL deadlock (Galera
    // reports a certification failure with the same 1213).
    if (databaseCode === '40001' || databaseCode === '40P01' || databaseCode === '1213' || code === 1213)
      return true;
  }
  return false;
}

/**
 * The database's own code on one error of the chain: a driver adapter's `originalCode` (the
 * SQLSTATE, or MySQL's error number as text), or what a failed raw query (P2010) carries in `meta`.
 */
function databaseCodeOf({ code, originalCode, meta }: Record<string, unknown>): unknown {
  return code === 'P2010' ? (meta as { code?: unknown } | undefined)?.code : originalCode;
}

/**
 * The SQLSTATE (or MySQL errno) the database answered with, in `error` or an error it wraps;
 * `undefined` for a failure that is not the database's answer (a connection lost, a driver that
 * stopped waiting).
 */
export function databaseCodeIn(error: unknown): unknown {
  for (const node of chainOf(error)) {
    const code = databaseCodeOf(node);
    if (code !== undefined) return code;
  }
  return undefined;
}

/**
 * PostgreSQL's `lock_not_available` (`lock_timeout`) and `query_canceled` (`statement_timeout`, or
 * a cancel); MariaDB/MySQL's lock wait timeout (`innodb_lock_wait_timeout`, 1205), MariaDB's
 * `max_statement_time` (1969) and MySQL's `max_execution_time` (3024).
 */
const POSTGRES_TIMEOUT_STATES = new Set<unknown>(['55P03', '57014']);
const MYSQL_TIMEOUT_ERRNOS = new Set<number>([1205, 1969, 3024]);

/**
 * The database stopped waiting: a statement outlived the lock or statement timeout the session
 * sets. The statement did nothing. A `statement_timeout` (57014) may also end a statement that was
 * only slow, and a cancel (`pg_cancel_backend`) raises the same code.
 */
export function isTimeout(error: unknown): boolean {
  for (const node of chainOf(error)) {
    const databaseCode = databaseCodeOf(node);
    if (POSTGRES_TIMEOUT_STATES.has(databaseCode) || MYSQL_TIMEOUT_ERRNOS.has(Number(databaseCode)))
      return true;
    // A mariadb connector error that no adapter converted.
    if (typeof node.errno === 'number' && 'sqlState' in node && MYSQL_TIMEOUT_ERRNOS.has(node.errno))
      return true;
  }
  return false;
}

/** SQLite: another connection holds the lock (`SQLITE_BUSY`, `SQLITE_BUSY_SNAPSHOT`, ...). */
export function isBusy(error: unknown): boolean {
  for (const { originalCode } of chainOf(error)) {
    if (typeof originalCode === 'string' && originalCode.startsWith('SQLITE_BUSY')) return true;
  }
  return false;
}

/**
 * Prisma's interactive transaction is gone before it committed: it outlived its `timeout`
 * ("A query cannot be executed on an expired transaction"), or was already rolled back or forgotten
 * ("Transaction already closed", "Transaction not found"). Prisma rolled it back; nothing committed.
 */
export function isExpiredTransaction(error: unknown): boolean {
  for (const node of chainOf(error)) {
    if (node instanceof TransactionClosedError) return true;
    const { code, message } = node;
    if (code !== 'P2028') continue;
    const text = String(message);
    // "Unable to start a transaction in the given time" is a connection wait (see isConnectionError).
    if (/expired transaction|rolled back|Transaction not found/i.test(text)) return true;
  }
  return false;
}

/** Codes for a database that cannot be reached, or a pool that cannot hand out a connection. */
const CONNECTION_CODES = new Set<unknown>([
  'P1001',
  'P1002',
  'P1008',
  'P1011',
  'P1017',
  'P2024',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
]);

/**
 * PostgreSQL SQLSTATEs of a connection the server ended or refused: `admin_shutdown` (a restart,
 * `pg_terminate_backend`), `crash_shutdown` (another backend crashed), `cannot_connect_now`
 * (starting up, shutting down, in recovery), `idle_session_timeout`, an idle-in-transaction
 * session timed out (`25P03`) and, from PostgreSQL 17, a transaction that outlived
 * `transaction_timeout` (`25P04`): the server ends the session, and the transaction rolls back.
 * Class 08 (connection exception) is matched as a class. CockroachDB's `40003` (statement
 * completion unknown) is a result lost with its connection.
 */
const POSTGRES_CONNECTION_STATES = new Set<unknown>([
  '57P01',
  '57P02',
  '57P03',
  '57P05',
  '25P03',
  '25P04',
  '40003',
]);

/**
 * MariaDB/MySQL error numbers of a connection lost or refused: the server's `ER_SERVER_SHUTDOWN`
 * (1053), `ER_CONNECTION_KILLED` (1927), too many connections (1040, 1203), the C client's lost
 * connection codes (2002, 2003, 2006, 2013); and the `mariadb` connector's own: connection already
 * closed (45001), socket closed unexpectedly (45009), connect timeout (45012), command on a closed
 * connection (45013), socket error (45019) or timeout (45026), pool timeout (45028), initial timeout
 * (45039), ping timeout (45042), no connection in the pool (45061).
 */
const MYSQL_CONNECTION_ERRNOS = new Set<number>([
  1040, 1053, 1203, 1927, 2002, 2003, 2006, 2013, 45001, 45009, 45012, 45013, 45019, 45026, 45028, 45039,
  45042, 45061,
]);

const CONNECTION_KINDS = new Set<unknown>([
  'DatabaseNotReachable',
  // A TLS handshake that failed, or a server without TLS for a URL that asks for it: nothing ran.
  'TlsConnectionError',
  'ConnectionClosed',
  'SocketTimeout',
  'TooManyConnections',
]);

/**
 * pg's own errors, which carry no code: a connection that ended, a pool or connect timeout, or a
 * query that outlived the URL's `query_timeout` (on a pipelining connection pg then destroys the
 * socket, and the transaction with it).
 */
const PG_CONNECTION_MESSAGE =
  /^(Connection terminated\b|Client has encountered a connection error and is not queryable|Client was closed and is not queryable|timeout exceeded when trying to connect|Query read timeout$)/;

/**
 * The database cannot be reached, the connection broke (a restart, a killed server, a failover),
 * or no connection could be had in time.
 */
export function isConnectionError(error: unknown): boolean {
  for (const node of chainOf(error)) {
    const { code, kind, originalCode, name, message } = node;
    if (CONNECTION_CODES.has(code) || CONNECTION_CODES.has(originalCode) || CONNECTION_KINDS.has(kind))
      return true;
    if (name === 'PrismaClientInitializationError') return true;
    if (kind === 'postgres' && typeof code === 'string') {
      if (code.startsWith('08') || POSTGRES_CONNECTION_STATES.has(code)) return true;
    }
    // A mariadb connector error that no adapter converted (it has `errno` and `sqlState`).
    if (typeof node.errno === 'number' && 'sqlState' in node && MYSQL_CONNECTION_ERRNOS.has(node.errno))
      return true;
    if (kind === 'mysql') {
      if (MYSQL_CONNECTION_ERRNOS.has(Number(code))) return true;
      if (typeof node.state === 'string' && node.state.startsWith('08')) return true;
      // Galera: this node has left the cluster's primary component (a partition, a restart).
      if (code === 1047 && /WSREP/.test(String(message))) return true;
    }
    if (typeof message === 'string' && PG_CONNECTION_MESSAGE.test(message)) return true;
    // The pool (or SQLite's single writer) could not hand out a connection within `maxWait`.
    if (code === 'P2028' && /Unable to start a transaction/i.test(String(message))) return true;
  }
  return false;
}

/**
 * The error to throw for `error` at the store's edge: `IDEMPOTENCY_TRANSACTION_EXPIRED` for a
 * transaction that outlived its timeout, `IDEMPOTENCY_STORE_UNAVAILABLE` for a database that cannot
 * be reached, a broken connection, a lock (SQLite's) not had in time, or a write conflict left
 * after the retries; both 503, both retried by the shipped clients. Anything else is returned as it is.
 */
export function asStoreError(error: unknown, failure = classify(error)): unknown {
  // The database's own words (a host and port, a table's name) stay in `cause`, for the server's
  // logs: the message is what clients get, and a GraphQL server does not mask our errors.
  switch (failure) {
    case 'expired':
      return new IdempotencyTransactionExpiredError(undefined, { cause: error });
    case 'writeConflict':
      // Only after the bounded retries: the transaction (or the lone statement) rolled back, so the
      // same key can be sent again.
      return new IdempotencyStoreUnavailableError(
        'The idempotency store kept hitting write conflicts; nothing was kept',
        { cause: error },
      );
    case 'connection':
    case 'busy':
      return new IdempotencyStoreUnavailableError(undefined, { cause: error });
    default:
      return error;
  }
}

/** Former name of `asStoreError`. */
export const asUnavailable = asStoreError;

/**
 * Runs `run`, waiting out SQLite's lock asynchronously (see `retryBusy`) and turning a database
 * that cannot be reached into `IDEMPOTENCY_STORE_UNAVAILABLE` (see `asStoreError`).
 */
export async function unavailableOnConnectionError<T>(
  run: () => PromiseLike<T>,
  busyWaitMs: number = DEFAULT_BUSY_WAIT_MS,
): Promise<T> {
  try {
    return await retryBusy(run, busyWaitMs);
  } catch (error) {
    throw asStoreError(error);
  }
}

/** How long a statement waits for SQLite's lock, asynchronously, when the caller does not say. */
export const DEFAULT_BUSY_WAIT_MS = 5_000;

/**
 * The busy timeout (better-sqlite3's `timeout`, in ms) to create a `PrismaBetterSqlite3` adapter
 * with. better-sqlite3 waits for a lock synchronously, blocking the event loop for up to this long
 * (its default is 5,000 ms); the store waits out longer locks itself, asynchronously.
 */
export const SQLITE_BUSY_TIMEOUT_MS = 50;

/**
 * The pause before attempt `attempt + 1`: full jitter over an exponential ceiling, so that
 * transactions that collided do not collide again in step.
 */
function backoffMs(attempt: number, baseMs: number, capMs: number): number {
  return Math.random() * Math.min(capMs, baseMs * 2 ** attempt);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Runs `run` again while SQLite answers `SQLITE_BUSY`, with jittered backoff between attempts and
 * for at most `busyWaitMs` in all. The wait is asynchronous: other requests are served meanwhile.
 * Safe because a statement or transaction that got `SQLITE_BUSY` did not take effect.
 */
export async function retryBusy<T>(run: () => PromiseLike<T>, busyWaitMs: number): Promise<T> {
  const deadline = performance.now() + busyWaitMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      const pause = backoffMs(attempt, 5, 100);
      if (!isBusy(error) || performance.now() + pause > deadline) throw error;
      await sleep(pause);
    }
  }
}

/** What `retryingTransaction` may ask about a transaction whose work failed (see `inside`). */
export interface AbortQuestions {
  /** Whether the database had aborted the transaction (see `abortedByDatabase`). */
  aborted?: (() => Promise<unknown>) | undefined;
  /** Whether statements ran on it after one failed with a write conflict (see `Opening`). */
  wentOnAfterConflict?: (() => boolean) | undefined;
  /**
   * Whether a write of the work's may have run outside the transaction: one answered with the session
   * out of it (see `Opening.wroteOutside`); absent where that cannot be told.
   */
  wroteOutside?: (() => boolean) | undefined;
}

/** Options of `retryingTransaction`. */
export interface TransactionRetryOptions {
  /** How many times a transaction that failed on a write conflict runs again. */
  maxRetries: number;
  /**
   * How long, in all, to wait for SQLite's lock (asynchronously) before giving up.
   * @default DEFAULT_BUSY_WAIT_MS
   */
  busyWaitMs?: number;
}

/**
 * What shows that the database aborted, on its own, the transaction `tx` still holds open for
 * Prisma (the conflict error it answered, or an error saying the session is out of its
 * transaction), or `undefined`: asked on the transaction's connection after the work threw an
 * error that says nothing about the database.
 *
 * A Galera node aborts a transaction whose writes lose certification to another node's (a "brute
 * force" abort) between its statements; CockroachDB aborts one another transaction pushed. The
 * writes are rolled back at once. The session learns of it as a write conflict on a later
 * statement (1213, 40001) or, on Galera, not at all: it is simply out of its transaction, and its
 * statements autocommit. A statement in between (Prisma's read-back of its own INSERT) then finds
 * nothing, and the resolver fails with an error of its own, e.g. a `TypeError` on `null`.
 *
 * MariaDB: a conflict error, or `@@in_transaction` 0 (the transaction the store began is gone;
 * only the resolver could have ended it otherwise, by a statement that commits implicitly, which
 * the store does not support). A conflict error no statement had answered yet says that nothing
 * ran after the abort; a session simply out of its transaction does not (the resolver may have
 * caught the conflict error and gone on, its later writes committing on their own). PostgreSQL and
 * CockroachDB: a conflict error (a transaction that failed otherwise answers SQLSTATE 25P02, which
 * says nothing about a conflict). SQLite: never.
 */
export async function abortedByDatabase(tx: PrismaQueryable, provider: Provider): Promise<unknown> {
  if (provider === 'sqlite') return undefined;
  try {
    if (provider !== 'mysql') {
      await tx.$queryRawUnsafe('SELECT 1');
      return undefined;
    }
    const [row] = await tx.$queryRawUnsafe<{ open: unknown }[]>('SELECT @@in_transaction AS open');
    if (Number(row?.open) !== 0) return undefined;
    return new Error('The database ended the transaction on its own: the session is no longer in one');
  } catch (error) {
    return classify(error) === 'writeConflict' ? error : undefined;
  }
}

/**
 * Runs one interactive transaction, again after a write conflict (up to `maxRetries` times) or
 * while SQLite's lock is busy (up to `busyWaitMs` in all), and maps what is left at the store's
 * edge (`asStoreError`).
 *
 * `attempt` opens the transaction and runs the work through `inside`, so that an error the work
 * threw (the resolver's) is told from one Prisma threw opening, committing or rolling back. A
 * resolver error with no database error in it (a gateway's `fetch failed`) is rethrown as it is,
 * unless `aborted` (asked before the transaction is rolled back, see `abortedByDatabase`) says
 * the database had already aborted the transaction: with a conflict error, nothing of it committed,
 * and it is a write conflict like any other; with the session simply out of its transaction, its
 * later statements may have committed on their own, and the call answers
 * `IDEMPOTENCY_OUTCOME_UNKNOWN`, unless `wroteOutside` says every statement answered outside the
 * transaction only read (then nothing committed, and it is a write conflict too). Any database failure (the store's statements, the resolver's own
 * `tx` statements, `COMMIT`) is the store's: the transaction rolled back, or, when the connection
 * was lost at `COMMIT`, committed whole, so a retry with the same key either replays or starts clean.
 */
export async function retryingTransaction<T>(
  attempt: (inside: <R>(work: () => Promise<R>, asks?: AbortQuestions) => Promise<R>) => PromiseLike<T>,
  { maxRetries, busyWaitMs = DEFAULT_BUSY_WAIT_MS }: TransactionRetryOptions,
): Promise<T> {
  const busyUntil = performance.now() + busyWaitMs;
  for (let conflicts = 0, tries = 0; ; tries++) {
    let thrown: { error: unknown; abort: unknown; wentOn: boolean; asks: AbortQuestions } | undefined;
    const inside = async <R>(work: () => Promise<R>, asks: AbortQuestions = {}): Promise<R> => {
      try {
        return await work();
      } catch (error) {
        // Asked first: the probe below is a statement of its own.
        const wentOn = asks.wentOnAfterConflict?.() ?? false;
        const { aborted } = asks;
        // Only an error that does not already say what happened to the database is worth the
        // question; this library's own errors say what happened (a claim the database stopped
        // waiting for, which may have rolled the whole transaction back, is the key in progress).
        const unexplained =
          aborted !== undefined &&
          !isIdempotencyError(error) &&
          classify(databaseErrorIn(error)) === undefined;
        thrown = {
          error,
          abort: unexplained && !wentOn ? await aborted() : undefined,
          wentOn,
          asks,
        };
        throw error;
      }
    };
    try {
      return await attempt(inside);
    } catch (error) {
      const fromWork = thrown?.error === error ? thrown : undefined;
      let database: unknown;
      let failure: DatabaseFailure | undefined;
      // The work caught a write conflict and sent statements after it, which ran on their own; or
      // a branch of it still running had a statement queued behind the conflict on the connection,
      // which answered only before the rollback Prisma queued behind it (asked again now).
      if (fromWork?.wentOn || fromWork?.asks.wentOnAfterConflict?.()) {
        throw outOfTransaction(
          new AggregateError([error], 'Statements ran after the database ended the transaction'),
        );
      }
      if (fromWork?.abort !== undefined) {
        database = new AggregateError(
          [fromWork.abort, error],
          'The database had aborted the transaction the work failed in',
        );
        // Out of its transaction with no conflict error left to answer, the session may have run
        // writes of the work on their own since the abort, and they committed: not run again.
        // Unless every answer to a write of the work (asked now: a branch of it may have had one in
        // flight) said the session was still in the transaction: then each ran in it and rolled back
        // with it, and only reads (Prisma's read-back of its own INSERT, finding nothing) ran after.
        if (classify(fromWork.abort) !== 'writeConflict' && (fromWork.asks.wroteOutside?.() ?? true))
          throw outOfTransaction(database);
        // Nothing of the aborted transaction committed: a write conflict, whatever the work threw.
        failure = 'writeConflict';
      } else {
        // What the work threw is the store's only through the database error inside it.
        database = fromWork ? databaseErrorIn(error) : error;
        if (database === undefined) throw error;
        failure = classify(database);
      }
      if (failure === 'writeConflict' && conflicts < maxRetries) {
        await sleep(backoffMs(conflicts++, 10, 1_000));
        continue;
      }
      const pause = backoffMs(tries, 5, 100);
      if (failure === 'busy' && performance.now() + pause < busyUntil) {
        await sleep(pause);
        continue;
      }
      // A failure that says nothing about the store (a constraint the resolver hit) stays as it was.
      throw failure === undefined ? error : asStoreError(database, failure);
    }
  }
}

/** The answer when the database ended the transaction and the session went on outside it. */
function outOfTransaction(cause: unknown): IdempotencyOutcomeUnknownError {
  return new IdempotencyOutcomeUnknownError(
    'The database ended the transaction on its own while the mutation ran, and its later statements, if it sent any, committed on their own (the session was no longer in a transaction): it is not run again; check its effects before retrying with the same key',
    { cause },
  );
}

/**
 * Runs one statement so that it stands on its own, again after a write conflict (see
 * `retryConflicts`). Through Prisma's SQLite adapter (one
 * connection) a statement outside a transaction runs inside whichever one another request has
 * open, sees its uncommitted rows and rolls back with it: on SQLite, with a client that has
 * `$transaction`, the statement gets a short transaction of its own (which waits for the open one).
 * SQLite's lock is waited for asynchronously, for up to `options.maxWait`; connection failures
 * become `IDEMPOTENCY_STORE_UNAVAILABLE`.
 */
export function standalone<T>(
  client: PrismaQueryable,
  provider: Provider,
  statement: (client: PrismaQueryable) => PromiseLike<T>,
  options?: PrismaTransactionOptions,
): Promise<T> {
  const { $transaction } = client as Partial<PrismaClientLike>;
  return unavailableOnConnectionError(
    () =>
      retryConflicts(() =>
        provider === 'sqlite' && typeof $transaction === 'function'
          ? (client as PrismaClientLike).$transaction((tx: PrismaQueryable) => statement(tx), options)
          : statement(client),
      ),
    options?.maxWait,
  );
}

/** How many times `standalone` runs a statement again after a write conflict. */
export const STATEMENT_CONFLICT_RETRIES = 5;

/**
 * Runs `run` again after a write conflict, up to `retries` times with jittered backoff. Safe for
 * autocommitted statements: one that failed on a conflict did not take effect. Galera certifies an
 * autocommitted write against the other nodes' and fails the loser with 1213 (after retrying it
 * once itself, `wsrep_retry_autocommit`), e.g. two lease claims of the same new key on two nodes.
 */
async function retryConflicts<T>(
  run: () => PromiseLike<T>,
  retries = STATEMENT_CONFLICT_RETRIES,
): Promise<T> {
  for (let conflicts = 0; ; conflicts++) {
    try {
      return await run();
    } catch (error) {
      if (conflicts >= retries || classify(error) !== 'writeConflict') throw error;
      await sleep(backoffMs(conflicts, 10, 1_000));
    }
  }
}
