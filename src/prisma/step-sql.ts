import type { LeaseOwner, StepWrite } from '../core/store.js';
import type { Provider } from './client.js';
import { databaseClock } from './database-clock.js';
import { deleteByPrimaryKey, noLockWait, sqliteExpiredRanges } from './maintenance-sql.js';
import { oneOfKeys, oneOfRows, raw, type Sql, sql } from './sql.js';

/** The tables steps are kept in and fenced against. */
export interface StepTables {
  /** @default 'idempotency_steps' */
  steps?: string;
  /** The records the steps belong to. @default 'idempotency_records' */
  records?: string;
}

/** The statements a store runs on `idempotency_steps`, per database; no Prisma in sight. */
export interface StepStatements {
  /** A key's steps in the order they ran, with `live_for_ms` by the database's clock. */
  list(scope: string, key: string): Sql;
  /**
   * Inserts a step only while its record is `IN_PROGRESS` under the owner's token: 1 row, or 0,
   * expiring when the record does (a step must not outlive it: a takeover would resume what a
   * sweep of the record would have cleared). The record's row is read with a lock, so a takeover
   * cannot commit between the check and this statement's commit (or the transaction's, for a
   * transactional step).
   */
  save(step: StepWrite): Sql;
  /**
   * `save` inside a transactional step's transaction. On MySQL/MariaDB, only while the session is
   * still in it: a deadlock (which `fn` may have caught) or a Galera abort rolled the step's writes
   * back, and the statement would commit on its own, a step stored without its writes.
   */
  saveInTransaction(step: StepWrite): Sql;
  /** Deletes the key's steps, only while the owner holds the record. */
  clear(owner: LeaseOwner): Sql;
  /**
   * Makes the key's steps that were live when the owner took the record over expire when the
   * record does, only while the owner holds it.
   */
  keep(owner: LeaseOwner): Sql;
}

/**
 * Builds the step statements for one database. Times are the database's, like the records'.
 * Table names are trusted SQL (the store's options), never a request's input.
 */
export function stepStatements(provider: Provider, tables: StepTables = {}): StepStatements {
  const mysql = provider === 'mysql';
  const postgres = provider === 'postgresql' || provider === 'cockroachdb';
  const steps = raw(tables.steps ?? 'idempotency_steps');
  const records = raw(tables.records ?? 'idempotency_records');
  const clock = databaseClock(provider);
  const now = raw(clock.now);
  const exact = raw(mysql ? ' COLLATE utf8mb4_bin' : '');
  const where = (scope: string, key: string) =>
    sql`scope = ${scope}${exact} AND idempotency_key = ${key}${exact}`;
  const owned = ({ scope, key, ownerToken }: LeaseOwner) =>
    sql`${where(scope, key)} AND owner_token = ${ownerToken} AND status = 'IN_PROGRESS'`;
  const bool = (value: boolean) => raw(postgres ? String(value) : value ? '1' : '0');
  const integer = (value: number) => (mysql ? sql`CAST(${value} AS SIGNED)` : sql`CAST(${value} AS INTEGER)`);
  // The record is read with a shared lock, so a takeover that has not committed yet is waited for
  // and then seen: without one, MySQL/MariaDB at READ COMMITTED (INSERT … SELECT locks the rows
  // it reads only from REPEATABLE READ up) and PostgreSQL's DELETE … EXISTS read the old owner's
  // token and let a stale owner write. SQLite has one writer.
  const lock = raw(postgres ? ' FOR SHARE' : mysql ? ' LOCK IN SHARE MODE' : '');
  // SQLite's stored times compare only as epoch milliseconds: both sides counted from the
  // statement's one now.
  const comparable = (column: string) => raw(provider === 'sqlite' ? clock.msUntil(column) : column);
  const save = (s: StepWrite, guard: Sql) =>
    sql`INSERT INTO ${steps} (scope, idempotency_key, name, ordinal, fingerprint, result, result_is_error, created_at, expires_at) SELECT scope, idempotency_key, ${s.name}, ${integer(s.position)}, ${s.fingerprint}, ${s.result}, ${bool(s.resultIsError)}, ${now}, expires_at FROM ${records} WHERE ${owned(s)}${guard}${lock}`;

  return {
    list: (scope, key) =>
      sql`SELECT name, ordinal, fingerprint, result, result_is_error, ${raw(clock.select('created_at'))}, ${raw(clock.msUntil('expires_at'))} AS live_for_ms FROM ${steps} WHERE ${where(scope, key)} ORDER BY ordinal`,
    save: (s) => save(s, raw('')),
    saveInTransaction: (s) => save(s, raw(mysql ? ' AND @@in_transaction = 1' : '')),
    clear: (owner) =>
      sql`DELETE FROM ${steps} WHERE ${where(owner.scope, owner.key)} AND EXISTS (SELECT 1 FROM ${records} WHERE ${owned(owner)}${lock})`,
    // A step is kept when it had not expired at the takeover (the record's `created_at`, which
    // the takeover wrote by the database's clock), not at this statement: the old expiry may pass
    // while the call stalls between the two, and the step would be run again.
    keep: (owner) =>
      sql`UPDATE ${steps} SET expires_at = (SELECT expires_at FROM ${records} WHERE ${owned(owner)}) WHERE ${where(owner.scope, owner.key)} AND ${comparable('expires_at')} > (SELECT ${comparable('created_at')} FROM ${records} WHERE ${owned(owner)}) AND EXISTS (SELECT 1 FROM ${records} WHERE ${owned(owner)}${lock})`,
  };
}

/**
 * Deletes at most `batchSize` steps whose record is gone (swept, or released) and whose own expiry
 * has passed, in one short statement; `batchSize` is written into the SQL (a validated integer).
 * A step expires with its record (`ttlMs` after the claim, or after the takeover that resumed it,
 * `keep`), and a call never resumes an expired step. Its expiry is checked too because
 * `idempotency_steps` serves every records table in its schema: a step whose record is not in the
 * table being swept may belong to a live call whose record is in another (`table`).
 */
export function stepSweepStatement(provider: Provider, batchSize: number, tables: StepTables = {}): string {
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) {
    throw new RangeError('batchSize must be a positive integer');
  }
  const { steps, sweepable } = stepSweep(provider, tables);
  switch (provider) {
    case 'mysql':
      // As the records' sweep: in expiry order (the index), failing at once on a row another
      // transaction holds (a transactional step not committed yet) rather than waiting for it
      // while holding what it read, and other calls' steps with it; the sweep then picks the batch
      // around the held rows (`stepSweepPick`).
      return noLockWait(
        `DELETE FROM ${steps} WHERE ${sweepable(steps)} ORDER BY expires_at LIMIT ${batchSize}`,
      );
    case 'sqlite':
      return `DELETE FROM ${steps} WHERE rowid IN (SELECT rowid FROM ${steps} s WHERE ${sqliteExpiredRanges('s.expires_at')} AND ${sweepable('s')} LIMIT ${batchSize})`;
    default: {
      const skipLocked = provider === 'postgresql' ? ' FOR UPDATE SKIP LOCKED' : '';
      return `DELETE FROM ${steps} WHERE (scope, idempotency_key, name) IN (SELECT s.scope, s.idempotency_key, s.name FROM ${steps} s WHERE ${sweepable('s')} LIMIT ${batchSize}${skipLocked})`;
    }
  }
}

/** A step `stepSweepPick` picked. */
export interface PickedStep {
  scope: string;
  idempotency_key: string;
  name: string;
}

/**
 * MySQL/MariaDB, for a batch whose `DELETE` met a row another transaction holds: at most
 * `batchSize` sweepable steps, skipping the rows others hold, for `stepSweepBatchDelete`.
 */
export function stepSweepPick(batchSize: number, tables: StepTables = {}): string {
  const { steps, sweepable } = stepSweep('mysql', tables);
  return `SELECT s.scope, s.idempotency_key, s.name FROM ${steps} s WHERE ${sweepable('s')} ORDER BY s.expires_at LIMIT ${batchSize} FOR UPDATE SKIP LOCKED`;
}

/**
 * MySQL/MariaDB: deletes the steps `stepSweepPick` picked, by primary key, each still sweepable,
 * with no lock wait (a row taken since the pick fails it at once, and the sweep deletes them one
 * by one).
 */
export function stepSweepBatchDelete(rows: readonly PickedStep[], tables: StepTables = {}): Sql {
  const { steps, sweepable } = stepSweep('mysql', tables);
  const picked = oneOfRows(
    'mysql',
    ['scope', 'idempotency_key', 'name'],
    rows.map((row) => [row.scope, row.idempotency_key, row.name]),
  );
  return sql`${raw(noLockWait(`${deleteByPrimaryKey(steps)} WHERE`))} (${picked}) AND ${raw(sweepable(steps))}`;
}

/** The steps table, and what makes a step of it (under `alias`) sweepable. */
function stepSweep(provider: Provider, tables: StepTables) {
  const steps = tables.steps ?? 'idempotency_steps';
  const records = tables.records ?? 'idempotency_records';
  const { passed } = databaseClock(provider);
  const sweepable = (alias: string) =>
    `${passed(`${alias}.expires_at`)} AND NOT EXISTS (SELECT 1 FROM ${records} r WHERE r.scope = ${alias}.scope AND r.idempotency_key = ${alias}.idempotency_key)`;
  return { steps, sweepable };
}

/**
 * The steps each of `records` has stored, in order, for the records `stuck` lists: one row per step
 * (`scope`, `idempotency_key`, `name`, `fingerprint`, and `live`, 1 while the step has not expired by
 * the database's clock).
 */
export function stepsOfRecords(
  provider: Provider,
  records: readonly { scope: string; key: string }[],
  tables: StepTables = {},
): Sql {
  const steps = raw(tables.steps ?? 'idempotency_steps');
  const live = raw(`CASE WHEN ${databaseClock(provider).ahead('expires_at')} THEN 1 ELSE 0 END`);
  return sql`SELECT scope, idempotency_key, name, fingerprint, ${live} AS live FROM ${steps} WHERE ${oneOfKeys(provider, records)} ORDER BY scope, idempotency_key, ordinal`;
}
