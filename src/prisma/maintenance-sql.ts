/**
 * The SQL of the maintenance commands (sweep, stats, stuck), per database. None of it takes a
 * parameter: expiry and leases are decided against the database's clock (see `databaseClock`),
 * never against a time the calling process binds.
 */

import type { Provider } from './client.js';
import { databaseClock } from './database-clock.js';
import { RECORDS_TABLE } from './records-table.js';
import { oneOfKeys, raw, type Sql, sql } from './sql.js';

/**
 * What the sweeper deletes: expired, and not a lease still running (an `IN_PROGRESS` record whose
 * lease outlasts its expiry stays until the lease ends).
 */
export function sweepable(provider: Provider): string {
  const clock = databaseClock(provider);
  return `${clock.passed('expires_at')} AND (status = 'COMPLETED' OR locked_until IS NULL OR ${clock.passed('locked_until')})`;
}

/** An `IN_PROGRESS` record whose lease ran out (or that never had one). */
export function stuck(provider: Provider): string {
  const clock = databaseClock(provider);
  return `status <> 'COMPLETED' AND (locked_until IS NULL OR ${clock.passed('locked_until')})`;
}

/**
 * `column` as something to sort by in time order. SQLite's stored values do not sort in time
 * order when their formats differ (every integer sorts below every text, and `…T…` text above
 * `… …` text of the same day), so it sorts by the distance from the database's clock.
 */
function inTimeOrder(provider: Provider, column: string): string {
  return provider === 'sqlite' ? databaseClock(provider).msUntil(column) : column;
}

/**
 * SQLite: ranges of an index on `column` (an expiry) that hold every expired row, so that a sweep
 * reads the expired rows, not the whole table (the exact test, through epoch milliseconds, cannot
 * use the index). Numbers sort below text: the first range holds the epoch-millisecond numbers up
 * to now, the second the text up to a second from now in ISO form, which holds every expired UTC
 * text (`…T…+00:00`, `…T…Z`, and `… …`, which sorts below `…T…` on the same day). Text with a
 * positive zone offset sorts by its local time: such a row is swept that much late, never early.
 */
export function sqliteExpiredRanges(column: string): string {
  return (
    `(${column} <= (unixepoch('now', 'subsec') * 1000) OR ` +
    `(${column} >= '' AND ${column} <= strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '+1 second')))`
  );
}

/**
 * Deletes at most `batchSize` sweepable records of `table` (SQL, see `recordsTable`) in one short
 * statement. `batchSize` is written into the SQL (a validated integer): not every driver binds
 * `LIMIT ?`.
 */
export function sweepStatement(provider: Provider, batchSize: number, table = RECORDS_TABLE): string {
  batchLimit(batchSize);
  const condition = sweepable(provider);
  switch (provider) {
    case 'mysql':
      // A DELETE that waited on a row another transaction holds (a takeover whose resolver runs)
      // kept the batch's other rows locked, and their claims waited for an unrelated resolver.
      // With no lock wait it fails at once instead (1205, `isTimeout`), rolled back, and
      // the sweep picks that batch around the held rows (`sweepPick`).
      return noLockWait(`DELETE FROM ${table} WHERE ${condition} ORDER BY expires_at LIMIT ${batchSize}`);
    case 'sqlite':
      return `DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} WHERE ${sqliteExpiredRanges('expires_at')} AND ${condition} LIMIT ${batchSize})`;
    default: {
      // The condition is checked again on the row as it is when locked, so a record taken over
      // between the two (now live again) is not deleted; SKIP LOCKED lets sweepers on several
      // servers work on different batches instead of queueing on the same rows.
      const skipLocked = provider === 'postgresql' ? ' FOR UPDATE SKIP LOCKED' : '';
      return `DELETE FROM ${table} WHERE (scope, idempotency_key) IN (SELECT scope, idempotency_key FROM ${table} WHERE ${condition} LIMIT ${batchSize}${skipLocked}) AND ${condition}`;
    }
  }
}

/**
 * MySQL/MariaDB, for a batch whose `DELETE` met a row another transaction holds: at most
 * `batchSize` sweepable keys of `table`, skipping the rows others hold (SKIP LOCKED, MariaDB 10.6),
 * for `sweepBatchDelete`.
 */
export function sweepPick(batchSize: number, table = RECORDS_TABLE): string {
  return `SELECT scope, idempotency_key FROM ${table} WHERE ${sweepable('mysql')} ORDER BY expires_at LIMIT ${batchLimit(batchSize)} FOR UPDATE SKIP LOCKED`;
}

/**
 * MySQL/MariaDB (`SET STATEMENT` is MariaDB's): `statement`, failing at once (1205, `isTimeout`)
 * instead of waiting when it meets a row another transaction holds.
 */
export function noLockWait(statement: string): string {
  return `SET STATEMENT innodb_lock_wait_timeout = 0 FOR ${statement}`;
}

/**
 * The largest `batchSize`. On MariaDB a batch that meets a row another transaction holds is
 * deleted by its keys, each bound as parameters (three per step): a statement takes at most 65,535.
 */
export const MAX_BATCH_SIZE = 10_000;

/** `batchSize`, checked before it is written into SQL. */
export function batchLimit(batchSize: number): number {
  if (!Number.isSafeInteger(batchSize) || batchSize < 1 || batchSize > MAX_BATCH_SIZE) {
    throw new RangeError(`batchSize must be an integer from 1 to ${MAX_BATCH_SIZE}`);
  }
  return batchSize;
}

/**
 * MySQL/MariaDB: deletes the keys `sweepPick` picked, by primary key, each still sweepable (a
 * record taken over since it was picked is live again and stays), with no lock wait: a row taken
 * since the pick fails the statement at once, and the sweep deletes the keys one by one.
 */
export function sweepBatchDelete(
  table: string,
  keys: readonly { scope: string; idempotency_key: string }[],
): Sql {
  const batch = oneOfKeys(
    'mysql',
    keys.map((row) => ({ scope: row.scope, key: row.idempotency_key })),
  );
  return sql`${raw(noLockWait(`${deleteByPrimaryKey(table)} WHERE`))} (${batch}) AND ${raw(sweepable('mysql'))}`;
}

/**
 * MySQL/MariaDB: `DELETE FROM table` that finds its rows by the primary key, whatever the
 * statistics say. Taken while purge shrank a table that had grown (a sweep does that), they can make
 * the `expires_at` range look cheaper: that plan also locks the entry just past the range (a claim
 * in progress), so a no-wait delete of picked keys failed and they stayed. MariaDB takes index
 * hints only in the multiple-table form.
 */
export function deleteByPrimaryKey(table: string): string {
  return `DELETE ${table} FROM ${table} FORCE INDEX (PRIMARY)`;
}

/**
 * A statement that reads no row and fails unless each of `tables` (SQL, see `storeTables`) exists:
 * a sweep runs it before it deletes anything.
 */
export function tablesExistQuery(tables: readonly string[]): string {
  return `SELECT 1 FROM ${tables.join(', ')} WHERE 1 = 0`;
}

/**
 * One row: `total`, `completed`, `expired` (sweepable), `stuck`, and the `oldest` and `newest`
 * `created_at` as stored.
 */
export function statsQuery(provider: Provider, table = RECORDS_TABLE): string {
  const count = (condition: string) => `SUM(CASE WHEN ${condition} THEN 1 ELSE 0 END)`;
  const first = (order: 'ASC' | 'DESC') =>
    provider === 'sqlite'
      ? `(SELECT ${databaseClock(provider).select('created_at')} FROM ${table} ORDER BY ${inTimeOrder(provider, 'created_at')} ${order} LIMIT 1)`
      : `${order === 'ASC' ? 'MIN' : 'MAX'}(created_at)`;
  return (
    `SELECT COUNT(*) AS total, ${count("status = 'COMPLETED'")} AS completed, ` +
    `${count(sweepable(provider))} AS expired, ${count(stuck(provider))} AS stuck, ` +
    `${first('ASC')} AS oldest, ${first('DESC')} AS newest FROM ${table}`
  );
}

/** At most `limit` stuck records, oldest first. `limit` is written into the SQL (a validated integer). */
export function stuckQuery(provider: Provider, limit: number, table = RECORDS_TABLE): string {
  if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError('limit must be a positive integer');
  const times = databaseClock(provider).select('created_at', 'locked_until', 'expires_at');
  return (
    `SELECT scope, idempotency_key, operation, fingerprint, ${times} FROM ${table} ` +
    `WHERE ${stuck(provider)} ORDER BY ${inTimeOrder(provider, 'created_at')} LIMIT ${limit}`
  );
}
