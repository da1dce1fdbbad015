import { createHash, randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Provider } from './client.js';
import { databaseCodeIn, isBusy } from './database-errors.js';
import { tablesExistQuery } from './maintenance-sql.js';
import { connectedSchemaOf, quotedName, recordsTable } from './records-table.js';

/**
 * The SQL migrations this package ships, one folder per provider: `prisma/<provider>/migrations/
 * <timestamp>_<name>/migration.sql`, as `prisma migrate` lays them out. A new table or column is one
 * more such folder per provider (its name sorts after the others); nothing else needs to change.
 */
export const shippedPrismaFolder = fileURLToPath(new URL('../../prisma/', import.meta.url));

/** One migration: its folder name (what `_prisma_migrations` records) and its SQL. */
export interface Migration {
  name: string;
  sql: string;
}

/** The folder of a provider's shipped migrations (CockroachDB takes PostgreSQL's as they are). */
export function shippedMigrationsFolder(provider: Provider): string {
  return `${shippedPrismaFolder}${provider === 'cockroachdb' ? 'postgresql' : provider}/migrations/`;
}

/** The migrations in a `migrations/` folder, in the order they apply (`inNameOrder`). */
export async function readMigrations(folder: string): Promise<Migration[]> {
  const names = (await readdir(folder, { withFileTypes: true }))
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name);
  return inNameOrder(
    await Promise.all(
      names.map(async (name) => ({ name, sql: await readFile(`${folder}${name}/migration.sql`, 'utf8') })),
    ),
  );
}

/**
 * `migrations`, sorted in the order they apply: by name, character code by character code, as
 * `prisma migrate` orders its folders (`20260101000000_B` before `20260101000000_a`), not by locale.
 */
export function inNameOrder(migrations: Migration[]): Migration[] {
  return migrations.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** A statement without parameters, as a driver adapter takes it. */
interface RawQuery {
  sql: string;
  args: unknown[];
  argTypes: unknown[];
}

/** `sql` as a statement without parameters. */
function unbound(sql: string): RawQuery {
  return { sql, args: [], argTypes: [] };
}

/** What a connected Prisma driver adapter offers that the migrations need. */
export interface MigrationTarget {
  /** `schemaName`: the schema a URL's `?schema=` gave `PrismaPg`, where the migrations go. */
  getConnectionInfo?(): { schemaName?: string };
  executeRaw(query: RawQuery): Promise<number>;
  queryRaw(query: RawQuery): Promise<{ rows: unknown[][] }>;
  executeScript(script: string): Promise<void>;
  startTransaction(): Promise<MigrationTransaction>;
}

/** A driver adapter's transaction: on its own connection until `commit` or `rollback`. */
export interface MigrationTransaction {
  /** `true`: `commit` and `rollback` end the transaction; `false`: they only release its connection. */
  readonly options: { usePhantomQuery: boolean };
  executeRaw(query: RawQuery): Promise<number>;
  queryRaw(query: RawQuery): Promise<{ rows: unknown[][] }>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/**
 * Applies the migrations the database has not recorded yet and returns their names. Each is
 * recorded in `_prisma_migrations` the way `prisma migrate deploy` does (same table, same
 * checksum), so `prisma migrate` later sees it as applied when its folder is in the app's own
 * migrations. Needs no schema engine, which `prisma migrate` downloads and offline machines lack.
 *
 * PostgreSQL, CockroachDB and SQLite apply each migration's statements and its record in one
 * transaction: a migration that fails leaves nothing of itself, and the next run applies it whole.
 * (A statement PostgreSQL refuses in a transaction, such as `CREATE INDEX CONCURRENTLY`, cannot be
 * in such a migration, as with `prisma migrate deploy`.) On PostgreSQL a script that holds its own
 * `BEGIN; … COMMIT;` runs as `prisma migrate deploy` runs it (see `scriptInPostgresSession`): what it
 * committed stays if a later statement fails. MySQL and MariaDB commit each DDL statement
 * on its own: a migration that fails partway keeps the statements before the failure, unrecorded,
 * and must be cleaned up by hand before it can run again.
 */
export async function applyMigrations(
  db: MigrationTarget,
  provider: Provider,
  migrations: readonly Migration[],
  /** How long to wait for another run's lock (PostgreSQL, MySQL), in seconds; for tests. */
  { lockWaitSeconds = LOCK_WAIT_SECONDS }: { lockWaitSeconds?: number } = {},
): Promise<string[]> {
  const run = (sql: string) => db.executeRaw(unbound(sql));
  // PostgreSQL: the adapter's schema (a URL's `?schema=`) holds the tables and the migrations'
  // record, as with `prisma migrate deploy`; without one, the search path decides.
  const schema = provider === 'mysql' ? undefined : connectedSchemaOf(db, provider);
  const inSchema = schema === undefined ? undefined : quotedName(provider, schema);
  const table = recordsTable(provider, '_prisma_migrations', schema);
  // Created only when missing: even with IF NOT EXISTS, CREATE SCHEMA and CREATE TABLE need the
  // CREATE privilege, which a role that owns a schema a DBA made may lack, or the role of an app
  // whose DBA migrated (its migrate at start only finds everything applied).
  const tableFound = await db.queryRaw(unbound(tablesExistQuery([table]))).then(
    () => true,
    () => false,
  );
  const createSchema =
    !tableFound && schema !== undefined && !(await schemaExists(db, schema))
      ? [`CREATE SCHEMA IF NOT EXISTS ${inSchema}`]
      : [];
  const timestamp =
    provider === 'postgresql' || provider === 'cockroachdb'
      ? 'TIMESTAMPTZ'
      : provider === 'mysql'
        ? 'DATETIME(3)'
        : 'DATETIME';
  const createTable = `CREATE TABLE IF NOT EXISTS ${table} (
    id VARCHAR(36) PRIMARY KEY NOT NULL,
    checksum VARCHAR(64) NOT NULL,
    finished_at ${timestamp},
    migration_name VARCHAR(255) NOT NULL,
    logs TEXT,
    rolled_back_at ${timestamp},
    started_at ${timestamp} NOT NULL DEFAULT CURRENT_TIMESTAMP,
    applied_steps_count INTEGER NOT NULL DEFAULT 0)`;
  // PostgreSQL: under the migrations' lock, as two runs on a new database would race on its catalog
  // (a unique violation on pg_type) even with IF NOT EXISTS.
  // Bounded as MySQL's GET_LOCK is: a run hung while holding the lock fails the next one, in time.
  const lock =
    provider === 'postgresql'
      ? {
          statements: [
            `SET LOCAL lock_timeout = '${lockWaitSeconds}s'`,
            `SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`,
          ],
          seconds: lockWaitSeconds,
        }
      : undefined;
  if (!tableFound) {
    const creating = [...createSchema, createTable];
    if (lock !== undefined) await statementsInOneTransaction(db, lock, undefined, creating);
    else for (const statement of creating) await run(statement);
  }
  const done = await db.queryRaw(
    unbound(`SELECT migration_name FROM ${table} WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL`),
  );
  const applied = new Set(done.rows.map(([name]) => String(name)));
  const ran: string[] = [];
  for (const { name, sql } of migrations) {
    if (applied.has(name)) continue;
    // Names are folder names and the checksum is hex: safe to write as literals.
    const quotedName = `'${name.replace(/'/g, "''")}'`;
    const record = `INSERT INTO ${table} (id, checksum, finished_at, migration_name, applied_steps_count) VALUES ('${randomUUID()}', '${createHash('sha256').update(sql).digest('hex')}', CURRENT_TIMESTAMP, ${quotedName}, 1)`;
    // Another run (a second server starting) may have applied it since the list was read: each
    // migration is applied under a lock, once its record is found missing under that lock.
    const recorded = `SELECT 1 FROM ${table} WHERE migration_name = ${quotedName} AND finished_at IS NOT NULL AND rolled_back_at IS NULL`;
    let applying: boolean;
    if (provider === 'mysql') {
      // MySQL commits each DDL statement on its own: they run one by one.
      applying = await inMysqlLock(db, recorded, [...mysqlStatements(sql), record], lockWaitSeconds);
    } else if (provider === 'sqlite') {
      applying = await scriptInOneTransaction(db, recorded, `${sql}\n;${record};`);
    } else if (provider === 'postgresql') {
      applying = await scriptInPostgresSession(
        db,
        lockWaitSeconds,
        inSchema,
        recorded,
        `${sql}\n;${record};`,
      );
    } else {
      // CockroachDB has no advisory locks: its transactions are serializable, and the second run's
      // record (or its CREATE) fails instead.
      const searchPath = inSchema === undefined ? [] : [`SET LOCAL search_path TO ${inSchema}`];
      applying = await statementsInOneTransaction(db, undefined, recorded, [...searchPath, sql, record]);
    }
    if (applying) ran.push(name);
  }
  return ran;
}

/**
 * The lock `prisma migrate` takes while it migrates (PostgreSQL's advisory lock key, MySQL's lock
 * name), so this and `prisma migrate deploy` never run a migration at once either.
 */
const MIGRATION_LOCK = 72707369;
const MYSQL_MIGRATION_LOCK = 'prisma_migrate';
/** How long a run waits for another run's migrations, in seconds. */
const LOCK_WAIT_SECONDS = 300;

function lockHeldError(seconds: number, cause?: unknown): Error {
  return new Error(`Another run held the migration lock for ${seconds} s: nothing was applied`, { cause });
}

/**
 * MySQL/MariaDB: the statements of a migration script, split at each `;` outside strings, quoted
 * names and comments, as the `mysql` client splits them (without its `DELIMITER` command). A piece
 * of nothing but comments and space is no statement.
 */
export function mysqlStatements(script: string): string[] {
  const statements: string[] = [];
  let start = 0;
  let code = false;
  for (let i = 0; i < script.length; i++) {
    const character = script[i]!;
    if (character === "'" || character === '"' || character === '`') {
      i = closingQuote(script, i);
      code = true;
    } else if (character === '#' || (script.startsWith('--', i) && /^\s?$/.test(script[i + 2] ?? ''))) {
      // To the end of the line (`--` starts a comment only before a space, or at the end).
      const end = script.indexOf('\n', i);
      i = end === -1 ? script.length : end;
    } else if (script.startsWith('/*', i)) {
      // `/*! … */` and `/*M! … */` (mysqldump's) are code the server runs, not comments.
      if (script.startsWith('/*!', i) || script.startsWith('/*M!', i)) code = true;
      const end = script.indexOf('*/', i + 2);
      i = end === -1 ? script.length : end + 1;
    } else if (character === ';') {
      if (code) statements.push(script.slice(start, i));
      start = i + 1;
      code = false;
    } else if (!/\s/.test(character)) {
      code = true;
    }
  }
  if (code) statements.push(script.slice(start));
  return statements;
}

/** Where the string or quoted name opening at `open` ends: backslash escapes, doubled quotes. */
function closingQuote(script: string, open: number): number {
  const quote = script[open];
  for (let i = open + 1; i < script.length; i++) {
    if (script[i] === '\\' && quote !== '`') i++;
    else if (script[i] === quote) {
      if (script[i + 1] !== quote) return i;
      i++;
    }
  }
  return script.length;
}

/** PostgreSQL, CockroachDB: whether the database has `schema`. */
async function schemaExists(db: MigrationTarget, schema: string): Promise<boolean> {
  const { rows } = await db.queryRaw({
    sql: 'SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1',
    args: [schema],
    argTypes: [{ scalarType: 'string', arity: 'scalar' }],
  });
  return rows.length > 0;
}

/**
 * SQLite: sends `statement` until it is not refused as busy, for up to `LOCK_WAIT_SECONDS` (a
 * `BEGIN IMMEDIATE` or `COMMIT` that failed busy changed nothing, and can be sent again).
 */
async function whileBusy(db: MigrationTarget, statement: string): Promise<void> {
  const deadline = performance.now() + LOCK_WAIT_SECONDS * 1_000;
  for (let pause = 5; ; pause = Math.min(pause * 2, 250)) {
    try {
      await db.executeScript(statement);
      return;
    } catch (error) {
      if (!isBusy(error) || performance.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

/** A SQLite script's `PRAGMA foreign_keys = OFF`. */
const FOREIGN_KEYS_OFF = /\bPRAGMA\s+foreign_keys\s*=\s*(?:OFF|0|FALSE|NO)\b/i;

/**
 * SQLite: runs `script` in one transaction, unless `recorded` finds it applied once the transaction
 * holds the database's write lock (`BEGIN IMMEDIATE`, which waits for another run's). better-sqlite3
 * runs a script as SQLite splits it (a trigger's `BEGIN … END` included), on the adapter's one
 * connection. A script that turns foreign keys off runs with them off (see below). Whether it ran.
 */
async function scriptInOneTransaction(
  db: MigrationTarget,
  recorded: string,
  script: string,
  /** Foreign keys are off for the script: checked before the commit. */
  checkingKeys = false,
): Promise<boolean> {
  // A script that turns foreign keys off (Prisma's table redefinitions: its DROP TABLE would
  // otherwise delete the referencing rows, ON DELETE CASCADE) must do so before the transaction,
  // where SQLite ignores the pragma; the keys are checked before the commit, and turned on again.
  const query = (sql: string) => db.queryRaw(unbound(sql));
  if (!checkingKeys && FOREIGN_KEYS_OFF.test(script)) {
    const [[on]] = (await query('PRAGMA foreign_keys')).rows as [[unknown]];
    if (Number(on) === 1) {
      await db.executeScript('PRAGMA foreign_keys = OFF');
      try {
        return await scriptInOneTransaction(db, recorded, script, true);
      } finally {
        await db.executeScript('PRAGMA foreign_keys = ON');
      }
    }
  }
  // The connection's busy timeout is short (adapterForUrl's 50 ms): another run's migration is
  // waited for here, without holding up the event loop.
  await whileBusy(db, 'BEGIN IMMEDIATE');
  try {
    if ((await query(recorded)).rows.length > 0) {
      await db.executeScript('ROLLBACK');
      return false;
    }
    await db.executeScript(script);
    if (checkingKeys) {
      const broken = (await query('PRAGMA foreign_key_check')).rows;
      if (broken.length > 0) {
        throw new Error(
          `The migration leaves ${broken.length} row(s) whose foreign key refers to no row (PRAGMA foreign_key_check; first: table ${String(broken[0]![0])}, rowid ${String(broken[0]![1])}): nothing was applied`,
        );
      }
    }
    // A reader's shared lock (rollback journal) holds the commit back, as another run's holds BEGIN.
    await whileBusy(db, 'COMMIT');
    return true;
  } catch (error) {
    // A failed script stops where it failed, inside the transaction.
    await db.executeScript('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/**
 * MySQL/MariaDB: runs `statements` one by one on a connection of its own (each DDL statement
 * commits by itself), holding the migration lock until they committed, unless `recorded` finds them
 * applied once it holds it. Whether they ran.
 */
async function inMysqlLock(
  db: MigrationTarget,
  recorded: string,
  statements: readonly string[],
  waitSeconds: number,
): Promise<boolean> {
  const session = await db.startTransaction();
  const query = (sql: string) => session.queryRaw(unbound(sql));
  try {
    const [[locked]] = (await query(`SELECT GET_LOCK('${MYSQL_MIGRATION_LOCK}', ${waitSeconds})`)).rows as [
      [unknown],
    ];
    if (Number(locked) !== 1) {
      throw lockHeldError(waitSeconds);
    }
    try {
      if ((await query(recorded)).rows.length > 0) return false;
      for (const statement of statements) await session.executeRaw(unbound(statement));
      return true;
    } finally {
      // Committed before the lock goes, which is the session's, not the transaction's: the run that
      // takes it next must find the record (the adapter's own COMMIT after this finds nothing to do).
      await session.executeRaw(unbound('COMMIT'));
      await query(`SELECT RELEASE_LOCK('${MYSQL_MIGRATION_LOCK}')`);
    }
  } finally {
    await session.commit();
  }
}

/**
 * PostgreSQL: sends `script` (a migration and its record) as one query on a connection of its own,
 * holding the migration lock, unless `recorded` finds it applied once it holds it; whether it ran.
 * Sent without parameters, `pg` uses the simple query protocol, whose statements commit together
 * (the server's implicit transaction) unless the script manages its own, as `prisma migrate
 * deploy` sends it: Prisma writes an enum's change as `BEGIN; … COMMIT;`, which ended a
 * transaction opened around it, and the schema's search path and the lock with it. So the lock
 * and the search path are the session's here, and the connection goes back to the pool as it came.
 */
async function scriptInPostgresSession(
  db: MigrationTarget,
  lockWaitSeconds: number,
  inSchema: string | undefined,
  recorded: string,
  script: string,
): Promise<boolean> {
  const session = await db.startTransaction();
  const run = (sql: string) => session.executeRaw(unbound(sql));
  try {
    // The adapter began a transaction: ended at once, so the script's statements are not inside it.
    if (!session.options.usePhantomQuery) await run('COMMIT');
    await run(`SET lock_timeout = '${lockWaitSeconds}s'`);
    await run(`SELECT pg_advisory_lock(${MIGRATION_LOCK})`).catch((error: unknown) => {
      // 55P03: the lock_timeout ran out while another run held the lock.
      throw databaseCodeIn(error) === '55P03' ? lockHeldError(lockWaitSeconds, error) : error;
    });
    try {
      if ((await session.queryRaw(unbound(recorded))).rows.length > 0) return false;
      if (inSchema !== undefined) await run(`SET search_path TO ${inSchema}`);
      await run(script).catch(async (error: unknown) => {
        // A script of its own transaction that failed inside it left it open, and aborted.
        await run('ROLLBACK').catch(() => undefined);
        throw error;
      });
      return true;
    } finally {
      await run(`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`);
    }
  } finally {
    await run('RESET search_path')
      .then(() => run('RESET lock_timeout'))
      .finally(() => session.commit());
  }
}

/**
 * PostgreSQL, CockroachDB: runs `statements` in one transaction, on the one connection it holds,
 * once it took `lock` and found no record of them (`recorded`); whether they ran. A statement may be
 * a whole script: sent without parameters, `pg` uses the simple query protocol,
 * which takes several statements (and splits them as the server does, dollar quotes and all). Not
 * `executeScript`: `@prisma/adapter-pg`'s splits on `;` and sends each piece to the pool on its
 * own, where each commits by itself. As Prisma's client does, `COMMIT` and `ROLLBACK` are sent here when the
 * adapter's `commit` and `rollback` only hand the connection back (`usePhantomQuery: false`, as
 * `@prisma/adapter-pg`'s).
 */
async function statementsInOneTransaction(
  db: MigrationTarget,
  lock: { statements: readonly string[]; seconds: number } | undefined,
  recorded: string | undefined,
  statements: readonly string[],
): Promise<boolean> {
  const tx = await db.startTransaction();
  const run = (sql: string) => tx.executeRaw(unbound(sql));
  let applying = false;
  try {
    for (const statement of lock?.statements ?? []) {
      await run(statement).catch((error: unknown) => {
        // 55P03: the lock_timeout set above ran out while another run held the lock.
        throw lock && databaseCodeIn(error) === '55P03' ? lockHeldError(lock.seconds, error) : error;
      });
    }
    applying = recorded === undefined || (await tx.queryRaw(unbound(recorded))).rows.length === 0;
    if (applying) for (const statement of statements) await run(statement);
    if (!tx.options.usePhantomQuery) await run('COMMIT');
  } catch (error) {
    if (!tx.options.usePhantomQuery) await run('ROLLBACK').catch(() => undefined);
    await tx.rollback();
    throw error;
  }
  await tx.commit();
  return applying;
}
