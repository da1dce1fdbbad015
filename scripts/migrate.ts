// Applies the SQL migrations in prisma/<provider>/migrations to a database, and records them in
// `_prisma_migrations` the way `prisma migrate deploy` does (same table, same checksums), so a
// later `prisma migrate deploy` sees them as applied. Needed because `prisma migrate` wants the
// schema engine, which cannot be downloaded offline.
//
//   tsx scripts/migrate.ts [url ...]     (default: $DATABASE_URL, else file:./dev.db)
import { createHash, randomUUID } from 'node:crypto';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { adapterForUrl, providerOfUrl, redact } from '../src/prisma/adapter-for-url.js';

interface SqlAdapter {
  executeRaw(query: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<number>;
  queryRaw(query: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<{ rows: unknown[][] }>;
  executeScript(script: string): Promise<void>;
  dispose(): Promise<void>;
}

const root = fileURLToPath(new URL('../prisma/', import.meta.url));

/** Applies every migration the database has not recorded yet; returns the names applied. */
export async function migrate(url: string): Promise<string[]> {
  const provider = providerOfUrl(url);
  if (provider === 'sqlite') {
    await mkdir(dirname(url.replace(/^(file|sqlite):(\/\/)?/i, '')), { recursive: true });
  }
  const adapter = (await (await adapterForUrl(url)).connect()) as SqlAdapter;
  const run = (sql: string) => adapter.executeRaw({ sql, args: [], argTypes: [] });
  try {
    const id = provider === 'mysql' ? '`_prisma_migrations`' : '"_prisma_migrations"';
    const timestamp =
      provider === 'postgresql' || provider === 'cockroachdb'
        ? 'TIMESTAMPTZ'
        : provider === 'mysql'
          ? 'DATETIME(3)'
          : 'DATETIME';
    await run(`CREATE TABLE IF NOT EXISTS ${id} (
      id VARCHAR(36) PRIMARY KEY NOT NULL,
      checksum VARCHAR(64) NOT NULL,
      finished_at ${timestamp},
      migration_name VARCHAR(255) NOT NULL,
      logs TEXT,
      rolled_back_at ${timestamp},
      started_at ${timestamp} NOT NULL DEFAULT CURRENT_TIMESTAMP,
      applied_steps_count INTEGER NOT NULL DEFAULT 0)`);
    const done = await adapter.queryRaw({
      sql: `SELECT migration_name FROM ${id} WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL`,
      args: [],
      argTypes: [],
    });
    const applied = new Set(done.rows.map(([name]) => String(name)));
    // CockroachDB takes the PostgreSQL migrations as they are.
    const dir = `${root}${provider === 'cockroachdb' ? 'postgresql' : provider}/migrations/`;
    const names = (await readdir(dir, { withFileTypes: true }))
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name)
      .sort();
    const ran: string[] = [];
    for (const name of names) {
      if (applied.has(name)) continue;
      const sql = await readFile(`${dir}${name}/migration.sql`, 'utf8');
      // Names are directory names and the checksum is hex: safe to write as literals.
      const record = `INSERT INTO ${id} (id, checksum, finished_at, migration_name, applied_steps_count) VALUES ('${randomUUID()}', '${createHash('sha256').update(sql).digest('hex')}', CURRENT_TIMESTAMP, '${name.replace(/'/g, "''")}', 1)`;
      if (provider === 'mysql') {
        // MySQL commits each DDL statement on its own; run them one by one (none has a ';' inside).
        for (const statement of sql.split(/;\s*$/m).filter((s) => s.replace(/--.*$/gm, '').trim())) {
          await run(statement);
        }
        await run(record);
      } else {
        // One script, one transaction: PostgreSQL runs a multi-statement query atomically; SQLite is told to.
        const script = `${sql}\n;${record};`;
        await adapter.executeScript(provider === 'sqlite' ? `BEGIN;\n${script}\nCOMMIT;` : script);
      }
      ran.push(name);
    }
    return ran;
  } finally {
    await adapter.dispose();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const urls = process.argv.slice(2);
  if (urls.length === 0) urls.push(process.env.DATABASE_URL ?? 'file:./dev.db');
  for (const url of urls) {
    const ran = await migrate(url);
    console.log(`${redact(url)}: ${ran.length ? `applied ${ran.join(', ')}` : 'up to date'}`);
  }
}
