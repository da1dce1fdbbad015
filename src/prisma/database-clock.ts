import type { Provider } from './client.js';

/**
 * The database's clock, as SQL. Every liveness decision (a record's expiry, a lease's end) is made
 * in SQL against it, never against the calling server's clock: app servers' clocks disagree, the
 * database's is one. Lease ends and expiries are computed in SQL too.
 */
export interface DatabaseClock {
  /** The current time, as a value to store in a timestamp column: once stored, it has `passed`. */
  readonly now: string;
  /** The current time plus the milliseconds bound to its one `?` placeholder, as a value to store. */
  readonly nowPlusMs: string;
  /** `column` is at or before now (an expiry or a lease end that has come); false for NULL. */
  passed(column: string): string;
  /** `column` is after now; false for NULL. */
  ahead(column: string): string;
  /** Milliseconds from now until `column` (negative once passed, NULL for NULL), as a number. */
  msUntil(column: string): string;
  /**
   * Timestamp `columns` as a select list, each under its own name, which every reader turns into
   * the same instant (`toDate`): the columns themselves, but on SQLite their epoch milliseconds.
   * Prisma's client reads a SQLite `YYYY-MM-DD HH:MM:SS` text (a column default's) in the process's
   * time zone, not as UTC.
   */
  select(...columns: string[]): string;
}

/**
 * SQLite's stored timestamps are text or numbers, depending on the driver adapter's
 * `timestampFormat` (`iso8601` text, `unixepoch-ms` integers) and on who wrote them (a column
 * default writes `YYYY-MM-DD HH:MM:SS`). Text and numbers do not compare (SQLite sorts every
 * number below every text), and texts of two formats do not compare either, so every comparison
 * goes through epoch milliseconds; values are written as ISO text, which every format reads.
 */
function sqliteMs(column: string): string {
  return `(CASE WHEN typeof(${column}) IN ('integer', 'real') THEN ${column} ELSE unixepoch(${column}, 'subsec') * 1000 END)`;
}
const SQLITE_NOW_MS = "(unixepoch('now', 'subsec') * 1000)";
const SQLITE_ISO = "'%Y-%m-%dT%H:%M:%f+00:00'";

const sqlite: DatabaseClock = {
  now: `strftime(${SQLITE_ISO}, 'now')`,
  nowPlusMs: `strftime(${SQLITE_ISO}, 'now', printf('%+.3f seconds', ? / 1000.0))`,
  passed: (column) => `${sqliteMs(column)} <= ${SQLITE_NOW_MS}`,
  ahead: (column) => `${sqliteMs(column)} > ${SQLITE_NOW_MS}`,
  msUntil: (column) => `(${sqliteMs(column)} - ${SQLITE_NOW_MS})`,
  select: (...columns) => columns.map((column) => `ROUND(${sqliteMs(column)}) AS ${column}`).join(', '),
};

// Prisma's `DateTime` columns are `timestamp(3)` without a zone, holding UTC: compare with UTC.
// The clock reads microseconds and `timestamp(3)` would round them to the nearest millisecond, up
// to half a millisecond into the future: a lease ended now would still be held for that long.
// Stored values are truncated instead, so what is written as now has already come.
const POSTGRES_NOW = "(statement_timestamp() AT TIME ZONE 'UTC')";
const POSTGRES_STORED_NOW = `date_trunc('milliseconds', ${POSTGRES_NOW})`;
const postgres: DatabaseClock = {
  now: POSTGRES_STORED_NOW,
  nowPlusMs: `(${POSTGRES_STORED_NOW} + CAST(? AS bigint) * interval '1 millisecond')`,
  passed: (column) => `${column} <= ${POSTGRES_NOW}`,
  ahead: (column) => `${column} > ${POSTGRES_NOW}`,
  msUntil: (column) => `CAST(EXTRACT(EPOCH FROM (${column} - ${POSTGRES_NOW})) * 1000 AS double precision)`,
  select: (...columns) => columns.join(', '),
};

// DATETIME(3) holds UTC (Prisma writes UTC); UTC_TIMESTAMP does not depend on the session's zone.
const MYSQL_NOW = 'UTC_TIMESTAMP(3)';
const mysql: DatabaseClock = {
  now: MYSQL_NOW,
  nowPlusMs: `(${MYSQL_NOW} + INTERVAL (? * 1000) MICROSECOND)`,
  passed: (column) => `${column} <= ${MYSQL_NOW}`,
  ahead: (column) => `${column} > ${MYSQL_NOW}`,
  msUntil: (column) => `(TIMESTAMPDIFF(MICROSECOND, ${MYSQL_NOW}, ${column}) / 1000)`,
  select: (...columns) => columns.join(', '),
};

/** The clock of `provider`'s database, as SQL. */
export function databaseClock(provider: Provider): DatabaseClock {
  switch (provider) {
    case 'sqlite':
      return sqlite;
    case 'mysql':
      return mysql;
    default:
      return postgres;
  }
}
