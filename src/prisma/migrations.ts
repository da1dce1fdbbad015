import { createHash, randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Provider } from './client.js';

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

/** The migrations in a `migrations/` folder, in the order they apply (by name). */
export async function readMigrations(folder: string): Promise<Migration[]> {
  const names = (await readdir(folder, { withFileTypes: true }))
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort();
  return Promise.all(
    names.map(async (name) => ({ name, sql: await readFile(`${folder}${name}/migration.sql`, 'utf8') })),
  );
}

/** What a connected Prisma driver adapter offers that the migrations need. */
export interface MigrationTarget {
  executeRaw(query: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<number>;
  queryRaw(query: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<{ rows: unknown[][] }>;
  executeScript(script: string): Promise<void>;
}

/**
 * Applies the migrations the database has not recorded yet and returns their names. Each is
 * recorded in `_prisma_migrations` the way `prisma migrate deploy` does (same table, same
 * checksum), so `prisma migrate` later sees it as applied when its folder is in the app's own
 * migrations. Needs no schema engine, which `prisma migrate` downloads and offline machines lack.
 * PostgreSQL and SQLite apply each migration with its record in one transaction; MySQL commits each
 * DDL statement on its own.
 */
export async function applyMigrations(
  db: MigrationTarget,
  provider: Provider,
  migrations: readonly Migration[],
): Promise<string[]> {
  const run = (sql: string) => db.executeRaw({ sql, args: [], argTypes: [] });
  const table = provider === 'mysql' ? '`_prisma_migrations`' : '"_prisma_migrations"';
  const timestamp =
    provider === 'postgresql' || provider === 'cockroachdb'
      ? 'TIMESTAMPTZ'
      : provider === 'mysql'
        ? 'DATETIME(3)'
        : 'DATETIME';
  await run(`CREATE TABLE IF NOT EXISTS ${table} (
    id VARCHAR(36) PRIMARY KEY NOT NULL,
    checksum VARCHAR(64) NOT NULL,
    finished_at ${timestamp},
    migration_name VARCHAR(255) NOT NULL,
    logs TEXT,
    rolled_back_at ${timestamp},
    started_at ${timestamp} NOT NULL DEFAULT CURRENT_TIMESTAMP,
    applied_steps_count INTEGER NOT NULL DEFAULT 0)`);
  const done = await db.queryRaw({
    sql: `SELECT migration_name FROM ${table} WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL`,
    args: [],
    argTypes: [],
  });
  const applied = new Set(done.rows.map(([name]) => String(name)));
  const ran: string[] = [];
  for (const { name, sql } of migrations) {
    if (applied.has(name)) continue;
    // Names are folder names and the checksum is hex: safe to write as literals.
    const record = `INSERT INTO ${table} (id, checksum, finished_at, migration_name, applied_steps_count) VALUES ('${randomUUID()}', '${createHash('sha256').update(sql).digest('hex')}', CURRENT_TIMESTAMP, '${name.replace(/'/g, "''")}', 1)`;
    if (provider === 'mysql') {
      // MySQL commits each DDL statement on its own; run them one by one (none has a ';' inside).
      for (const statement of sql.split(/;\s*$/m).filter((s) => s.replace(/--.*$/gm, '').trim())) {
        await run(statement);
      }
      await run(record);
    } else {
      // One script, one transaction: PostgreSQL runs a multi-statement query atomically; SQLite is told to.
      const script = `${sql}\n;${record};`;
      await db.executeScript(provider === 'sqlite' ? `BEGIN;\n${script}\nCOMMIT;` : script);
    }
    ran.push(name);
  }
  return ran;
}
