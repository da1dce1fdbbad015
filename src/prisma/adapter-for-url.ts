import type { Provider } from './client.js';

/** A Prisma driver-adapter factory, as `new PrismaClient({ adapter })` takes it. */
export interface DriverAdapterFactory {
  readonly provider: string;
  readonly adapterName: string;
  connect(): Promise<unknown>;
}

/** The provider a database URL points at, from its scheme. */
export function providerOfUrl(url: string): Exclude<Provider, 'cockroachdb'> {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  switch (scheme) {
    case 'file':
    case 'sqlite':
      return 'sqlite';
    case 'postgres':
    case 'postgresql':
      return 'postgresql';
    case 'mysql':
    case 'mariadb':
      return 'mysql';
    default:
      throw new TypeError(
        `Unsupported database URL ${redact(url)}: expected file:, postgresql:// or mysql:// (mariadb://)`,
      );
  }
}

/**
 * Builds the driver adapter for a URL: `@prisma/adapter-better-sqlite3` for `file:`,
 * `@prisma/adapter-pg` for `postgresql://` (waiting `connect_timeout` seconds for a connection,
 * 10 by default), `@prisma/adapter-mariadb` for `mysql://`/`mariadb://`.
 * The adapter packages are optional peer dependencies, loaded only when their scheme is used.
 */
export async function adapterForUrl(url: string): Promise<DriverAdapterFactory> {
  switch (providerOfUrl(url)) {
    case 'sqlite': {
      const { PrismaBetterSqlite3 } = await importAdapter<typeof import('@prisma/adapter-better-sqlite3')>(
        '@prisma/adapter-better-sqlite3',
      );
      return new PrismaBetterSqlite3({ url: url.replace(/^sqlite:/i, 'file:') });
    }
    case 'postgresql': {
      const { PrismaPg } = await importAdapter<typeof import('@prisma/adapter-pg')>('@prisma/adapter-pg');
      return new PrismaPg({ connectionString: url, connectionTimeoutMillis: connectTimeoutMs(url) });
    }
    case 'mysql': {
      const { PrismaMariaDb } =
        await importAdapter<typeof import('@prisma/adapter-mariadb')>('@prisma/adapter-mariadb');
      return new PrismaMariaDb(url.replace(/^mysql:/i, 'mariadb:'));
    }
  }
}

/**
 * How long to wait for a PostgreSQL connection: libpq's `connect_timeout` parameter (seconds, 0 for
 * no limit), else 10 s. `pg` alone would wait for a server that accepts and never answers forever.
 */
function connectTimeoutMs(url: string): number {
  const given = URL.canParse(url) ? new URL(url).searchParams.get('connect_timeout') : null;
  if (given === null) return 10_000;
  const seconds = Number(given);
  if (given.trim() === '' || !Number.isFinite(seconds) || seconds < 0) {
    throw new TypeError(`connect_timeout must be a number of seconds, not ${JSON.stringify(given)}`);
  }
  return seconds * 1_000;
}

async function importAdapter<T>(name: string): Promise<T> {
  try {
    return (await import(name)) as T;
  } catch (cause) {
    throw new Error(`This database URL needs ${name}: npm install ${name}`, { cause });
  }
}

/** The URL with its password hidden, for error messages. */
export function redact(url: string): string {
  return url.replace(/\/\/([^:/@]+):[^@/]*@/, '//$1:***@');
}
