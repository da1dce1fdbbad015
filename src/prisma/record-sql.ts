import type { ClaimRequest, Completion, LeaseOwner, LeaseRequest } from '../core/store.js';
import type { Provider } from './client.js';
import { databaseClock } from './database-clock.js';
import { raw, type Sql, sql } from './sql.js';

/** The statements a store runs on `idempotency_records`, per database; no Prisma in sight. */
export interface RecordStatements {
  /** Whether updates can return the times they wrote in the same statement (not MySQL/MariaDB). */
  readonly returningUpdates: boolean;
  /** The record, with `live_for_ms` by the database's clock. */
  find(scope: string, key: string): Sql;
  /** The same inside the claim's transaction: waits for, then locks, the committed row. */
  findLocked(scope: string, key: string): Sql;
  /** The claim's `created_at`. */
  createdAt(scope: string, key: string): Sql;
  /** The completion's `completed_at` and `expires_at`. */
  completedTimes(scope: string, key: string): Sql;
  /**
   * Where updates cannot return (MySQL/MariaDB): a lease completion's times, read once its `UPDATE`
   * stored the result. By then the record may have expired and been swept, or taken over by a
   * retry; the result was stored all the same, and the times given are then those of a record
   * that has just expired (`expires_at` now, `completed_at` `ttlMs` before it), the latest it
   * can have had.
   */
  leaseCompletedTimes(owner: LeaseOwner & { ttlMs: number }): Sql;
  /** Inserts an `IN_PROGRESS` record unless the key exists; returns its `created_at` when it did. */
  claim(claim: ClaimRequest): Sql;
  /** Replaces the record (no longer live, locked by `findLocked`) with a new claim. */
  takeOver(claim: ClaimRequest): Sql;
  /** Stores the claimed record's result; on PostgreSQL it fails when there is no claim. */
  complete(completion: Completion): Sql;
  /** `claim` with a lease and an owner token. */
  leaseClaim(claim: LeaseRequest): Sql;
  /** Takes over the record only if it is not live by the database's clock: 1 row, or 0. */
  leaseTakeOver(claim: LeaseRequest): Sql;
  leaseExtend(owner: LeaseOwner, leaseMs: number): Sql;
  leaseComplete(completion: Completion & LeaseOwner): Sql;
  leaseRelease(owner: LeaseOwner): Sql;
}

/**
 * Builds the statements for one database. Every time is the database's: `created_at`,
 * `completed_at`, `expires_at` and `locked_until` are computed in SQL, and so is whether a record
 * is still live, so servers whose clocks disagree still agree on every record.
 */
export function recordStatements(provider: Provider, tableName = 'idempotency_records'): RecordStatements {
  const mysql = provider === 'mysql';
  const postgres = provider === 'postgresql' || provider === 'cockroachdb';
  const table = raw(tableName);
  const clock = databaseClock(provider);
  const now = raw(clock.now);
  const inMs = (ms: number) => raw(clock.nowPlusMs, [ms]);
  const falseValue = raw(postgres ? 'false' : '0');
  const bool = (value: boolean) => (postgres ? value : value ? 1 : 0);
  // MySQL/MariaDB: compare byte for byte even if the table's collation is case- or
  // accent-insensitive, so "Bob" never reads or changes "bob"'s record (the shipped migration's
  // utf8mb4_bin makes this a no-op that keeps the primary key's index).
  const exact = raw(mysql ? ' COLLATE utf8mb4_bin' : '');
  const where = (scope: string, key: string) =>
    sql`WHERE scope = ${scope}${exact} AND idempotency_key = ${key}${exact}`;
  const owned = ({ scope, key, ownerToken }: LeaseOwner) =>
    sql`${where(scope, key)} AND owner_token = ${ownerToken} AND status = 'IN_PROGRESS'`;
  // SQLite has one writer: the transaction already excludes everybody else. MySQL/MariaDB need a
  // locking read, or REPEATABLE READ's snapshot could hide the row another transaction just
  // committed. PostgreSQL: an exclusive lock, since the claim may take the row over next and
  // duplicates that each held a shared one would deadlock upgrading it. MySQL: a shared one,
  // because INSERT IGNORE has already share-locked the duplicate row; upgrading every duplicate's
  // lock deadlocked instead.
  const lock = raw(provider === 'sqlite' ? '' : mysql ? ' LOCK IN SHARE MODE' : ' FOR UPDATE');
  const liveFor = raw(
    `${clock.msUntil("CASE WHEN status = 'COMPLETED' THEN expires_at ELSE locked_until END")} AS live_for_ms`,
  );
  const notLive = raw(
    `((status = 'COMPLETED' AND ${clock.passed('expires_at')}) OR ` +
      `(status <> 'COMPLETED' AND (locked_until IS NULL OR ${clock.passed('locked_until')})))`,
  );
  // INSERT IGNORE would also turn data errors into warnings; the core bounds every column's length.
  const insertIfAbsent = (columns: Sql, values: Sql) =>
    mysql
      ? sql`INSERT IGNORE INTO ${table} (${columns}) VALUES (${values}) RETURNING created_at`
      : sql`INSERT INTO ${table} (${columns}) VALUES (${values}) ON CONFLICT (scope, idempotency_key) DO NOTHING RETURNING created_at`;
  // MariaDB has INSERT … RETURNING but no UPDATE … RETURNING: it reads `created_at` afterwards.
  const returning = raw(mysql ? '' : ' RETURNING created_at');
  const returningTimes = raw(mysql ? '' : ' RETURNING completed_at, expires_at');
  const claimColumns = raw('scope, idempotency_key, operation, fingerprint, status, created_at, expires_at');
  const leaseColumns = raw(
    'scope, idempotency_key, operation, fingerprint, status, owner_token, locked_until, created_at, expires_at',
  );
  const times = clock.select('locked_until', 'created_at', 'completed_at', 'expires_at');
  const columns = raw(
    `scope, idempotency_key, operation, fingerprint, status, result, result_is_error, owner_token, ${times}`,
  );
  const find = (scope: string, key: string) =>
    sql`SELECT ${columns}, ${liveFor} FROM ${table} ${where(scope, key)}`;

  return fixedTexts({
    returningUpdates: !mysql,
    find,
    findLocked: (scope, key) => sql`${find(scope, key)}${lock}`,
    createdAt: (scope, key) => sql`SELECT created_at FROM ${table} ${where(scope, key)}`,
    completedTimes: (scope, key) => sql`SELECT completed_at, expires_at FROM ${table} ${where(scope, key)}`,
    leaseCompletedTimes: ({ scope, key, ownerToken, ttlMs }) =>
      sql`SELECT completed_at, expires_at FROM (SELECT completed_at, expires_at, 1 AS ours FROM ${table} ${where(scope, key)} AND owner_token = ${ownerToken} AND status = 'COMPLETED' UNION ALL SELECT ${inMs(-ttlMs)}, ${now}, 0) AS times ORDER BY ours DESC LIMIT 1`,
    claim: (c) =>
      insertIfAbsent(
        claimColumns,
        sql`${c.scope}, ${c.key}, ${c.operation}, ${c.fingerprint}, 'IN_PROGRESS', ${now}, ${inMs(c.ttlMs)}`,
      ),
    takeOver: (c) =>
      sql`UPDATE ${table} SET operation = ${c.operation}, fingerprint = ${c.fingerprint}, status = 'IN_PROGRESS', result = NULL, result_is_error = ${falseValue}, owner_token = NULL, locked_until = NULL, created_at = ${now}, completed_at = NULL, expires_at = ${inMs(c.ttlMs)} ${where(c.scope, c.key)}${returning}`,
    complete: (c) => {
      const completion = sql`status = 'COMPLETED', result = ${c.result}, result_is_error = ${bool(c.resultIsError)}, completed_at = ${now}, expires_at = ${inMs(c.ttlMs)}`;
      const update = sql`UPDATE ${table} SET ${completion} ${where(c.scope, c.key)}${returningTimes}`;
      // PostgreSQL: with no claimed row the statement fails (a division by zero), which aborts the
      // transaction, so a completion sent with the COMMIT (`completesWithCommit`) rolls it back.
      if (provider === 'postgresql') {
        return sql`WITH done AS (${update}) SELECT max(completed_at) AS completed_at, max(expires_at) AS expires_at, 1 / count(*) AS claimed FROM done`;
      }
      if (!mysql) return update;
      // MariaDB has no UPDATE … RETURNING. The claimed row, selected into itself, always collides
      // with itself, so the duplicate-key branch updates it and RETURNING gives its times in the
      // same statement; with no claimed row nothing is selected, written or returned. Nor when
      // the session is no longer in its transaction: a deadlock (which the resolver may have caught)
      // or a Galera abort rolled the claim back, and the statement would commit on its own over
      // the row there now (a duplicate's completed record, an expired one the claim took over).
      return sql`INSERT INTO ${table} (${claimColumns}) SELECT ${claimColumns} FROM ${table} ${where(c.scope, c.key)} AND status = 'IN_PROGRESS' AND @@in_transaction = 1 ON DUPLICATE KEY UPDATE ${completion} RETURNING completed_at, expires_at`;
    },
    leaseClaim: (c) =>
      insertIfAbsent(
        leaseColumns,
        sql`${c.scope}, ${c.key}, ${c.operation}, ${c.fingerprint}, 'IN_PROGRESS', ${c.ownerToken}, ${inMs(c.leaseMs)}, ${now}, ${inMs(c.ttlMs)}`,
      ),
    // The new owner token always changes the row, so MySQL's "changed rows" and "found rows"
    // counts agree.
    leaseTakeOver: (c) =>
      sql`UPDATE ${table} SET operation = ${c.operation}, fingerprint = ${c.fingerprint}, status = 'IN_PROGRESS', result = NULL, result_is_error = ${falseValue}, owner_token = ${c.ownerToken}, locked_until = ${inMs(c.leaseMs)}, created_at = ${now}, completed_at = NULL, expires_at = ${inMs(c.ttlMs)} ${where(c.scope, c.key)} AND ${notLive}${returning}`,
    leaseExtend: (owner, leaseMs) => sql`UPDATE ${table} SET locked_until = ${inMs(leaseMs)} ${owned(owner)}`,
    leaseComplete: (c) =>
      sql`UPDATE ${table} SET status = 'COMPLETED', result = ${c.result}, result_is_error = ${bool(c.resultIsError)}, locked_until = NULL, completed_at = ${now}, expires_at = ${inMs(c.ttlMs)} ${owned(c)}${returningTimes}`,
    leaseRelease: (owner) => sql`DELETE FROM ${table} ${owned(owner)}`,
  });
}

/**
 * `statements` with each one's text kept from its first build. No text here depends on the values,
 * so every call hands on the same string, which PostgreSQL's numbering (`textFor`) and the prepared
 * statements' names find by its hash, computed once, where a text joined anew was flattened and
 * hashed on every call.
 */
function fixedTexts(statements: RecordStatements): RecordStatements {
  const fixed: Record<string, unknown> = {};
  for (const [name, member] of Object.entries(statements)) {
    if (typeof member !== 'function') {
      fixed[name] = member;
      continue;
    }
    let text: string | undefined;
    fixed[name] = (...args: unknown[]): Sql => {
      const built = (member as (...args: unknown[]) => Sql)(...args);
      text ??= built.text;
      if (built.text.length !== text.length) throw new Error(`The text of the ${name} statement changed`);
      return { text, values: built.values };
    };
  }
  return fixed as unknown as RecordStatements;
}
