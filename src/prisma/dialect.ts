import type { Provider } from './client.js';

/** The columns of `idempotency_records`, in the order every SELECT returns them. */
const COLUMNS =
  'scope, idempotency_key, operation, fingerprint, status, result, result_is_error, owner_token, locked_until, created_at, completed_at, expires_at';

/** The SQL the store runs, per database. Parameters are positional, in the order each comment gives. */
export type Dialect = {
  /** (scope, key) */
  find: string;
  /** (scope, key) — inside the claim's transaction: waits for, then locks, the committed row. */
  findLocked: string;
  /** (scope, key, operation, fingerprint, created_at, expires_at) — 1 row affected, or 0 when the key exists. */
  claim: string;
  /** (operation, fingerprint, created_at, expires_at, scope, key) */
  takeOver: string;
  /** (result, result_is_error, completed_at, expires_at, scope, key) */
  complete: string;
  /** (scope, key, operation, fingerprint, owner_token, locked_until, created_at, expires_at) — 0 rows when the key exists. */
  leaseClaim: string;
  /**
   * (operation, fingerprint, owner_token, locked_until, created_at, expires_at, scope, key, now, now)
   * — 1 row when the record was not live and is now ours, else 0. The new owner token always
   * changes the row, so MySQL's "changed rows" and "found rows" counts agree.
   */
  leaseTakeOver: string;
  /** (locked_until, scope, key, owner_token) — 0 rows when the lease is not the caller's. */
  leaseExtend: string;
  /** (result, result_is_error, completed_at, expires_at, scope, key, owner_token) — 0 rows when fenced. */
  leaseComplete: string;
  /** (scope, key, owner_token) — 0 rows when fenced. */
  leaseRelease: string;
};

/**
 * A record that is no longer live (see `isLive`): a completed one past its expiry, or an
 * `IN_PROGRESS` one whose lease ran out. Parameters: (now, now).
 */
const NOT_LIVE =
  "((status = 'COMPLETED' AND expires_at <= ?) OR (status <> 'COMPLETED' AND (locked_until IS NULL OR locked_until <= ?)))";

/**
 * What the sweeper deletes: expired, and not a lease still running (an `IN_PROGRESS` record whose
 * lease outlasts its expiry stays until the lease ends). Parameters: (now, now).
 */
export const SWEEPABLE =
  "expires_at <= ? AND (status = 'COMPLETED' OR locked_until IS NULL OR locked_until <= ?)";

/** An `IN_PROGRESS` record whose lease ran out (or that never had one). Parameter: (now). */
export const STUCK = "status <> 'COMPLETED' AND (locked_until IS NULL OR locked_until <= ?)";

/** Builds the statements for one database: placeholders, insert-if-absent and locking reads differ. */
export function dialectFor(provider: Provider, table = 'idempotency_records'): Dialect {
  const mysql = provider === 'mysql';
  // INSERT IGNORE would also turn data errors into warnings; the core bounds every column's length.
  const insertIfAbsent = (columns: string, values: string) =>
    mysql
      ? `INSERT IGNORE INTO ${table} (${columns}) VALUES (${values})`
      : `INSERT INTO ${table} (${columns}) VALUES (${values}) ON CONFLICT (scope, idempotency_key) DO NOTHING`;
  // SQLite has one writer: the transaction already excludes everybody else. MySQL/MariaDB need a
  // locking read, or REPEATABLE READ's snapshot could hide the row another transaction just committed.
  // PostgreSQL: an exclusive lock, since the claim may take the row over next and duplicates that each
  // held a shared one would deadlock upgrading it. MySQL: a shared one, because INSERT IGNORE has
  // already share-locked the duplicate row; upgrading every duplicate's lock deadlocked instead
  // (InnoDB then rolls one back, and the transaction is retried).
  const lock = provider === 'sqlite' ? '' : mysql ? ' LOCK IN SHARE MODE' : ' FOR UPDATE';
  const where = 'WHERE scope = ? AND idempotency_key = ?';
  const owned = `${where} AND owner_token = ? AND status = 'IN_PROGRESS'`;
  const falseValue = provider === 'postgresql' || provider === 'cockroachdb' ? 'false' : '0';
  const find = `SELECT ${COLUMNS} FROM ${table} ${where}`;
  const statements: Dialect = {
    find,
    findLocked: `${find}${lock}`,
    claim: insertIfAbsent(
      'scope, idempotency_key, operation, fingerprint, status, created_at, expires_at',
      `?, ?, ?, ?, 'IN_PROGRESS', ?, ?`,
    ),
    takeOver: `UPDATE ${table} SET operation = ?, fingerprint = ?, status = 'IN_PROGRESS', result = NULL, result_is_error = ${falseValue}, owner_token = NULL, locked_until = NULL, created_at = ?, completed_at = NULL, expires_at = ? ${where}`,
    complete: `UPDATE ${table} SET status = 'COMPLETED', result = ?, result_is_error = ?, completed_at = ?, expires_at = ? ${where}`,
    leaseClaim: insertIfAbsent(
      'scope, idempotency_key, operation, fingerprint, status, owner_token, locked_until, created_at, expires_at',
      `?, ?, ?, ?, 'IN_PROGRESS', ?, ?, ?, ?`,
    ),
    leaseTakeOver: `UPDATE ${table} SET operation = ?, fingerprint = ?, status = 'IN_PROGRESS', result = NULL, result_is_error = ${falseValue}, owner_token = ?, locked_until = ?, created_at = ?, completed_at = NULL, expires_at = ? ${where} AND ${NOT_LIVE}`,
    leaseExtend: `UPDATE ${table} SET locked_until = ? ${owned}`,
    leaseComplete: `UPDATE ${table} SET status = 'COMPLETED', result = ?, result_is_error = ?, locked_until = NULL, completed_at = ?, expires_at = ? ${owned}`,
    leaseRelease: `DELETE FROM ${table} ${owned}`,
  };
  return provider === 'postgresql' || provider === 'cockroachdb'
    ? numberPlaceholders(statements)
    : statements;
}

/**
 * Deletes at most `batchSize` sweepable records in one short statement. Parameters: (now, now).
 * `batchSize` is written into the SQL (a validated integer): not every driver binds `LIMIT ?`.
 */
export function sweepStatement(provider: Provider, batchSize: number, table = 'idempotency_records'): string {
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) {
    throw new RangeError('batchSize must be a positive integer');
  }
  switch (provider) {
    case 'mysql':
      return `DELETE FROM ${table} WHERE ${SWEEPABLE} ORDER BY expires_at LIMIT ${batchSize}`;
    case 'sqlite':
      return `DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} WHERE ${SWEEPABLE} LIMIT ${batchSize})`;
    default: {
      // The outer condition is checked again on the row as it is when locked, so a record taken
      // over between the two (now live again) is not deleted; SKIP LOCKED lets sweepers on
      // several servers work on different batches instead of queueing on the same rows.
      const skipLocked = provider === 'postgresql' ? ' FOR UPDATE SKIP LOCKED' : '';
      const sweepable = numbered(SWEEPABLE); // $1 and $2, used in both places
      return `DELETE FROM ${table} WHERE (scope, idempotency_key) IN (SELECT scope, idempotency_key FROM ${table} WHERE ${sweepable} LIMIT ${batchSize}${skipLocked}) AND ${sweepable}`;
    }
  }
}

/** A statement for `provider`: PostgreSQL-style numbered placeholders where they are needed. */
export function forProvider(provider: Provider, sql: string): string {
  return provider === 'postgresql' || provider === 'cockroachdb' ? numbered(sql) : sql;
}

function numbered(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

/** PostgreSQL numbers its placeholders: `?` → `$1`, `$2`, … (no statement here has a literal `?`). */
function numberPlaceholders<T extends Record<string, string>>(statements: T): T {
  return Object.fromEntries(Object.entries(statements).map(([name, sql]) => [name, numbered(sql)])) as T;
}
