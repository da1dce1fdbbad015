// Opens the example database: embedded SQLite by default, PostgreSQL or MariaDB/MySQL when
// DATABASE_URL says so. Applies the migrations first, so every example runs on a fresh clone.
// In your own app you would import your own generated PrismaClient instead.
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import { PrismaClient as SqliteClient } from '../../generated/sqlite/client.js';
import { migrate } from '../../scripts/migrate.js';
import { adapterForUrl, providerOfUrl } from '../../src/prisma/adapter-for-url.js';

export const defaultDatabaseUrl = 'file:./.tmp/examples.db';

/** The three generated clients share their models; the examples use one type for all. */
export type ExamplePrismaClient = SqliteClient;

export async function openDatabase(
  url = process.env.DATABASE_URL ?? defaultDatabaseUrl,
): Promise<ExamplePrismaClient> {
  await migrate(url);
  const Client = {
    sqlite: SqliteClient,
    postgresql: PostgresClient,
    // No CockroachDB client is generated here: the PostgreSQL one speaks to it over adapter-pg.
    cockroachdb: PostgresClient,
    mysql: MysqlClient,
  }[providerOfUrl(url)];
  return new (Client as typeof SqliteClient)({ adapter: (await adapterForUrl(url)) as never });
}
