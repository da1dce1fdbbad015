// The databases the benchmark runs on, each a database of its own: the sweep scenario deletes
// every expired record it finds, which must never be another suite's.
import { rm } from 'node:fs/promises';
import {
  type AdapterForUrlOptions,
  type AdapterQueries,
  adapterForUrl,
  providerOfUrl,
} from 'idempotent-mutations/prisma';
import { PrismaClient as MysqlClient } from '../generated/mysql/client.js';
import { PrismaClient as PostgresClient } from '../generated/postgresql/client.js';
import { PrismaClient as SqliteClient } from '../generated/sqlite/client.js';
import { migrate } from '../scripts/migrate.js';
import { watchedAdapter } from '../test/helpers/recorded-adapter.js';

/** The generated clients share their models; the benchmark uses one type for all three. */
export type BenchPrismaClient = SqliteClient;

/** One database to measure. */
export interface BenchDatabase {
  name: 'SQLite' | 'PostgreSQL' | 'MariaDB';
  url: string;
  /** What `--only` accepts for it. */
  aliases: string[];
}

/** Where the benchmark runs unless told otherwise: local servers, in a database named for it. */
export function benchDatabases(urls: {
  sqlite?: string;
  postgres?: string;
  mysql?: string;
}): BenchDatabase[] {
  return [
    { name: 'SQLite', url: urls.sqlite ?? 'file:bench/.data/bench.db', aliases: ['sqlite'] },
    {
      name: 'PostgreSQL',
      url: urls.postgres ?? 'postgresql://postgres@127.0.0.1:5432/idempotent_mutations_bench',
      aliases: ['postgresql', 'postgres', 'pg'],
    },
    {
      name: 'MariaDB',
      url: urls.mysql ?? 'mysql://root@127.0.0.1:3306/idempotent_mutations_bench',
      aliases: ['mysql', 'mariadb'],
    },
  ];
}

/**
 * Creates the database when the server does not have it yet, and applies the migrations. A SQLite
 * file starts empty on every run. Throws when the server cannot be reached.
 */
export async function prepareDatabase({ url }: BenchDatabase): Promise<void> {
  const provider = providerOfUrl(url);
  if (provider === 'sqlite') {
    const file = url.replace(/^(file|sqlite):(\/\/)?/i, '');
    await Promise.all(['', '-journal', '-wal', '-shm'].map((end) => rm(`${file}${end}`, { force: true })));
  } else {
    const parsed = new URL(url);
    const name = decodeURIComponent(parsed.pathname.slice(1));
    if (!/^\w+$/.test(name))
      throw new Error(`Unexpected database name "${name}": letters, digits and _ only`);
    // Connect to the server's own database to create ours.
    parsed.pathname = provider === 'postgresql' ? '/postgres' : '/mysql';
    const server = await openClient(parsed.toString());
    try {
      if (provider === 'postgresql') {
        const found = await server.$queryRawUnsafe<unknown[]>(
          'SELECT 1 FROM pg_database WHERE datname = $1',
          name,
        );
        if (found.length === 0) await server.$executeRawUnsafe(`CREATE DATABASE "${name}"`);
      } else {
        await server.$executeRawUnsafe(`CREATE DATABASE IF NOT EXISTS \`${name}\``);
      }
    } finally {
      await server.$disconnect();
    }
  }
  await migrate(url);
}

/** A client of the test schema for `url`; `onQuery` sees every statement Prisma sends. */
export async function openClient(
  url: string,
  onQuery?: (event: { query: string }) => void,
  options?: AdapterForUrlOptions,
): Promise<BenchPrismaClient> {
  const Client = {
    sqlite: SqliteClient,
    postgresql: PostgresClient,
    // No CockroachDB client is generated here: the PostgreSQL one speaks to it over adapter-pg.
    cockroachdb: PostgresClient,
    mysql: MysqlClient,
  }[providerOfUrl(url)];
  const prisma = new (Client as typeof SqliteClient)({
    adapter: (await adapterForUrl(url, options)) as never,
    ...(onQuery ? { log: [{ emit: 'event' as const, level: 'query' as const }] } : {}),
  });
  if (onQuery) (prisma as unknown as { $on(event: 'query', cb: typeof onQuery): void }).$on('query', onQuery);
  return prisma;
}

/** A driver adapter of its own on `url`, for the store's `reads`. */
export type BenchReads = AdapterQueries & { dispose(): Promise<void> };

/**
 * A connected driver adapter on `url` (a pool of its own), as the store's `reads`; `onQuery` sees
 * its statements too, as a logging client's.
 */
export async function openReads(
  url: string,
  onQuery?: (event: { query: string }) => void,
  options?: AdapterForUrlOptions,
): Promise<BenchReads> {
  const adapter = (await (await adapterForUrl(url, options)).connect()) as BenchReads;
  return onQuery ? watchedAdapter(adapter, (query) => onQuery({ query })) : adapter;
}
