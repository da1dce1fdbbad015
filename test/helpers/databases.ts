import { randomUUID } from 'node:crypto';
import { describe } from 'vitest';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import { PrismaClient as SqliteClient } from '../../generated/sqlite/client.js';
import { type AdapterForUrlOptions, adapterForUrl } from '../../src/prisma/adapter-for-url.js';

/** One database the store suites run against. */
export interface TestDatabase {
  name: 'SQLite' | 'PostgreSQL' | 'MariaDB';
  provider: 'sqlite' | 'postgresql' | 'mysql';
  /** Unset: the suite is skipped (and the global setup says so). */
  url: string | undefined;
  /** The variable that enables it. */
  env?: string;
}

/** SQLite always runs, on a file per test file; the servers run when their URL is set. */
export const databases: TestDatabase[] = [
  { name: 'SQLite', provider: 'sqlite', url: `file:.tmp/test-${process.pid}-${randomUUID().slice(0, 8)}.db` },
  {
    name: 'PostgreSQL',
    provider: 'postgresql',
    url: process.env.TEST_POSTGRES_URL,
    env: 'TEST_POSTGRES_URL',
  },
  { name: 'MariaDB', provider: 'mysql', url: process.env.TEST_MYSQL_URL, env: 'TEST_MYSQL_URL' },
];

/** A generated client of the test schema (records + payments + orders) for any provider. */
export type TestPrismaClient = SqliteClient | PostgresClient | MysqlClient;

const clients = { sqlite: SqliteClient, postgresql: PostgresClient, mysql: MysqlClient } as const;

/** Connects a generated client to `db`; SQLite files are migrated on first use. */
export async function connect(db: TestDatabase, options?: AdapterForUrlOptions): Promise<SqliteClient> {
  if (!db.url) throw new Error(`${db.name} is not configured`);
  if (db.provider === 'sqlite') {
    const { migrate } = await import('../../scripts/migrate.js');
    await migrate(db.url);
  }
  const Client = clients[db.provider] as unknown as typeof SqliteClient;
  // The three generated clients have the same models; one type keeps the tests readable.
  return new Client({ adapter: (await adapterForUrl(db.url, options)) as never }) as unknown as SqliteClient;
}

/** `describe` once per database; unconfigured ones are reported as skipped. */
export function describeEachDatabase(title: string, suite: (db: TestDatabase) => void): void {
  for (const db of databases) {
    (db.url ? describe : describe.skip)(`${title} on ${db.name}`, () => suite(db));
  }
}

/**
 * `describeEachDatabase` for PostgreSQL and MariaDB only: behaviour between concurrent
 * transactions, which SQLite's one writer never has.
 */
export function describeEachServerDatabase(title: string, suite: (db: TestDatabase) => void): void {
  for (const db of databases) {
    if (db.provider === 'sqlite') continue;
    (db.url ? describe : describe.skip)(`${title} on ${db.name}`, () => suite(db));
  }
}

/** A scope nobody else uses, so suites can share a database. */
export function uniqueScope(label = 'user'): string {
  return `${label}-${randomUUID()}`;
}
