// Applies this repository's migrations to a database: the shipped ones (prisma/<provider>/migrations,
// what `idempotent-mutations migrate` applies for a user) and the example tables the tests, examples
// and benchmarks use (examples/prisma/<provider>/migrations), in name order, recorded in
// `_prisma_migrations` as `prisma migrate deploy` would.
//
//   tsx scripts/migrate.ts [url ...]     (default: $DATABASE_URL, else file:./dev.db)
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { adapterForUrl, providerOfUrl, redact, sqliteFileOfUrl } from '../src/prisma/adapter-for-url.js';
import {
  applyMigrations,
  inNameOrder,
  type MigrationTarget,
  readMigrations,
  shippedMigrationsFolder,
} from '../src/prisma/migrations.js';

const examples = fileURLToPath(new URL('../examples/prisma/', import.meta.url));

/** Applies every migration the database has not recorded yet; returns the names applied. */
export async function migrate(url: string): Promise<string[]> {
  const provider = providerOfUrl(url);
  if (provider === 'sqlite') {
    await mkdir(dirname(sqliteFileOfUrl(url)), { recursive: true });
  }
  const migrations = inNameOrder([
    ...(await readMigrations(shippedMigrationsFolder(provider))),
    ...(await readMigrations(
      `${examples}${provider === 'cockroachdb' ? 'postgresql' : provider}/migrations/`,
    )),
  ]);
  const adapter = (await (await adapterForUrl(url)).connect()) as MigrationTarget & {
    dispose(): Promise<void>;
  };
  try {
    return await applyMigrations(adapter, provider, migrations);
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
