import type { PoolConfig } from 'pg';
import { retryBusyCommits } from './busy-commits.js';
import type { Provider } from './client.js';
import { SQLITE_BUSY_TIMEOUT_MS } from './database-errors.js';
import { directStatements } from './direct-statements.js';
import { lazyBegin, type PgClientClass } from './lazy-begin.js';
import { redact } from './redact.js';
import { idempotencyStatementNames } from './sql.js';

export { redact } from './redact.js';

/** A Prisma driver-adapter factory, as `new PrismaClient({ adapter })` takes it. */
export interface DriverAdapterFactory {
  readonly provider: string;
  readonly adapterName: string;
  connect(): Promise<unknown>;
}

/**
 * The provider a database URL points at, from its scheme. CockroachDB speaks PostgreSQL's protocol
 * and its own URLs say `postgresql://`: write `cockroachdb://` (or `cockroach://`) to get its SQL.
 */
export function providerOfUrl(url: string): Provider {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  switch (scheme) {
    case 'file':
    case 'sqlite':
      return 'sqlite';
    case 'postgres':
    case 'postgresql':
      return 'postgresql';
    case 'cockroach':
    case 'cockroachdb':
      return 'cockroachdb';
    case 'mysql':
    case 'mariadb':
      return 'mysql';
    case 'prisma+postgres':
      // Prisma Postgres and Accelerate answer Prisma's query protocol, not SQL over a driver.
      throw new TypeError(
        `Unsupported database URL ${redact(url)}: a prisma+postgres:// URL (Prisma Postgres, Accelerate) is not a database connection; use the database's direct postgresql:// connection string`,
      );
    default:
      throw new TypeError(
        `Unsupported database URL ${redact(url)}: expected file:, postgresql://, cockroachdb:// or mysql:// (mariadb://)`,
      );
  }
}

/**
 * The parameters of Prisma 6's SQLite URLs (`file:./dev.db?connection_limit=1`). They have nothing to
 * set on `@prisma/adapter-better-sqlite3`, which opens one connection, and the store waits out a lock
 * itself: a URL written for Prisma 6 keeps working without them.
 */
const PRISMA6_SQLITE_PARAMETERS = new Set([
  'connection_limit',
  'socket_timeout',
  'pool_timeout',
  'max_connection_lifetime',
  'max_idle_connection_lifetime',
]);

/**
 * The file a SQLite URL names, as `adapterForUrl` and the CLI open it: `file:` or `sqlite:`, then a
 * path, relative to the working directory or absolute. A `//` after the scheme is dropped
 * (`sqlite://./app.db` is `./app.db`, `file:///srv/app.db` is `/srv/app.db`); nothing is
 * percent-decoded. `file::memory:` is an in-memory database. A query is not part of the path: the
 * parameters of Prisma 6's SQLite URLs (`?connection_limit=1`, `socket_timeout`, `pool_timeout`,
 * `max_connection_lifetime`, `max_idle_connection_lifetime`) are ignored, and any other is refused
 * rather than lost (SQLite's own URI parameters, such as `mode=ro`, are not supported).
 */
export function sqliteFileOfUrl(url: string): string {
  if (providerOfUrl(url) !== 'sqlite') throw new TypeError(`Not a SQLite URL: ${redact(url)}`);
  const [, path = '', query] = /^[a-z]+:(?:\/\/)?([^?]*)(?:\?(.*))?$/is.exec(url) ?? [];
  const unknown = (query ?? '')
    .split('&')
    .map((parameter) => parameter.split('=')[0] ?? '')
    .filter((name) => name && !PRISMA6_SQLITE_PARAMETERS.has(name));
  if (unknown.length > 0) {
    throw new TypeError(
      `Unsupported in the SQLite URL ${redact(url)}: ${unknown.join(', ')}. Only the file's path is read; Prisma 6's connection_limit, socket_timeout, pool_timeout, max_connection_lifetime and max_idle_connection_lifetime are ignored`,
    );
  }
  if (!path) throw new TypeError(`No file path in the SQLite URL ${redact(url)}: write file:./dev.db`);
  return path;
}

/** How long `adapterForUrl`'s PostgreSQL pool waits for a connection by default, in ms. */
const CONNECT_TIMEOUT_MS = 10_000;

/** Options of `adapterForUrl`. */
export interface AdapterForUrlOptions {
  /**
   * PostgreSQL: how long to wait for a connection (to connect, or for a free one in the pool) when
   * the URL has no `connect_timeout`; `0` waits forever, as `pg` does by default (a server that
   * accepts connections and never answers would hold every call, a retry's read included).
   * @default 10_000
   */
  connectTimeoutMs?: number | undefined;
  /**
   * PostgreSQL: prepare this library's own statements under names (`idempotencyStatementNames`).
   * A URL with `pgbouncer=true` (Prisma's flag for PgBouncer in transaction mode) turns it off.
   * @default true
   */
  preparedStatements?: boolean | undefined;
  /**
   * Let the store send its statements in a transaction straight through the driver adapter
   * (`directStatements`); `false` keeps them on the client, where Prisma's query log, tracing and
   * extensions see them.
   * @default true
   */
  directStatements?: boolean | undefined;
}

/**
 * Builds the driver adapter for a URL: `@prisma/adapter-better-sqlite3` for `file:` or `sqlite:`
 * (on the file `sqliteFileOfUrl` reads from the URL, with a busy timeout of `SQLITE_BUSY_TIMEOUT_MS`,
 * its `COMMIT`s waiting for other connections' readers: see `retryBusyCommits`),
 * `@prisma/adapter-pg` for `postgresql://` and `cockroachdb://` (honouring libpq's `connect_timeout`,
 * in seconds, and Prisma's `?schema=`, which becomes the adapter's `schema` option; its connections
 * pipeline and send each transaction's `BEGIN` with its first statement, see `lazyBegin`, and
 * prepare this library's statements once, see `idempotencyStatementNames`),
 * `@prisma/adapter-mariadb` for `mysql://`/`mariadb://`; each wrapped by `directStatements` (unless
 * `directStatements: false`), so the store's own statements in a transaction skip Prisma's client runtime.
 * The adapter packages are optional peer dependencies, loaded only when their scheme is used.
 */
export async function adapterForUrl(
  url: string,
  options: AdapterForUrlOptions = {},
): Promise<DriverAdapterFactory> {
  const factory = await driverAdapterFor(url, options);
  return (options.directStatements ?? true) ? directStatements(factory) : factory;
}

async function driverAdapterFor(url: string, options: AdapterForUrlOptions): Promise<DriverAdapterFactory> {
  switch (providerOfUrl(url)) {
    case 'sqlite': {
      const { PrismaBetterSqlite3 } = await importAdapter<typeof import('@prisma/adapter-better-sqlite3')>(
        '@prisma/adapter-better-sqlite3',
      );
      // A short synchronous busy wait: the store waits out longer locks without blocking the event
      // loop, and a busy COMMIT is sent again (`retryBusyCommits`).
      return retryBusyCommits(
        new PrismaBetterSqlite3({
          // The adapter strips one `file:` and opens the rest as it is.
          url: `file:${sqliteFileOfUrl(url)}`,
          timeout: SQLITE_BUSY_TIMEOUT_MS,
        }),
      );
    }
    case 'postgresql':
    case 'cockroachdb': {
      const { PrismaPg } = await importAdapter<typeof import('@prisma/adapter-pg')>('@prisma/adapter-pg');
      const connectionString = url.replace(/^cockroach(db)?:/i, 'postgresql:');
      const connectionTimeoutMillis = connectTimeoutMs(url) ?? options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS;
      // Prisma 6 read the schema from the URL; Prisma 7's adapter takes it as an option.
      const schema = schemaOfUrl(url);
      const pool = { connectionString, connectionTimeoutMillis, ...(await lazyBeginClient()) };
      const prepared = (options.preparedStatements ?? true) && !behindPgBouncer(url);
      return new PrismaPg(pool as PoolConfig, {
        ...(schema ? { schema } : {}),
        ...(prepared ? { statementNameGenerator: idempotencyStatementNames } : {}),
      });
    }
    case 'mysql': {
      const { PrismaMariaDb } =
        await importAdapter<typeof import('@prisma/adapter-mariadb')>('@prisma/adapter-mariadb');
      return new PrismaMariaDb(url.replace(/^mysql:/i, 'mariadb:'));
    }
  }
}

/**
 * The pool's connections (`lazyBegin`): listening for their errors from the start, and, where `pg`
 * can pipeline (8.23 and later), sending each `BEGIN` in the round trip of the transaction's first
 * statement. `pg` comes with `@prisma/adapter-pg`; where
 * it cannot be imported from here (a strict package layout), connections are `pg`'s own.
 */
async function lazyBeginClient(): Promise<{ pipeline?: true; Client?: PgClientClass }> {
  const pg = await import('pg').catch(() => undefined);
  const Client = (pg?.default ?? pg)?.Client as PgClientClass | undefined;
  if (!Client) return {};
  // On a `pg` that cannot pipeline, `lazyBegin` only listens for the connections' errors.
  return { ...('pipeline' in new Client() ? { pipeline: true as const } : {}), Client: lazyBegin(Client) };
}

/** The URL's `connect_timeout` parameter (libpq's: seconds, 0 for no limit) in milliseconds, if any. */
function connectTimeoutMs(url: string): number | undefined {
  const given = URL.canParse(url) ? new URL(url).searchParams.get('connect_timeout') : null;
  if (given === null) return undefined;
  const seconds = Number(given);
  if (given.trim() === '' || !Number.isFinite(seconds) || seconds < 0) {
    throw new TypeError(`connect_timeout must be a number of seconds, not ${JSON.stringify(given)}`);
  }
  return seconds * 1_000;
}

/** Prisma's `pgbouncer=true`: the URL goes through PgBouncer in transaction mode. */
function behindPgBouncer(url: string): boolean {
  return URL.canParse(url) && new URL(url).searchParams.get('pgbouncer') === 'true';
}

/** The URL's `schema` parameter, as Prisma's PostgreSQL URLs name the schema of the models. */
function schemaOfUrl(url: string): string | undefined {
  const schema = URL.canParse(url) ? new URL(url).searchParams.get('schema') : null;
  return schema || undefined;
}

async function importAdapter<T>(name: string): Promise<T> {
  try {
    return (await import(name)) as T;
  } catch (cause) {
    throw new Error(`This database URL needs ${name}: npm install ${name}`, { cause });
  }
}
