#!/usr/bin/env node
/**
 * The `idempotent-mutations` command: `sweep`, `stats` and `stuck` against the database of a URL.
 * It needs no generated Prisma client: it talks to the driver adapter the URL's scheme picks.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { IdempotencyStoreUnavailableError } from '../core/errors.js';
import { adapterForUrl, providerOfUrl, redact, sqliteFileOfUrl } from '../prisma/adapter-for-url.js';
import { queryableOf, type SqlDriverAdapterLike } from '../prisma/adapter-queryable.js';
import type { PrismaQueryable, Provider } from '../prisma/client.js';
import { isConnectionError } from '../prisma/database-errors.js';
import { MAX_BATCH_SIZE } from '../prisma/maintenance-sql.js';
import {
  applyMigrations,
  inNameOrder,
  type Migration,
  type MigrationTarget,
  readMigrations,
  shippedMigrationsFolder,
  shippedPrismaFolder,
} from '../prisma/migrations.js';
import { connectedSchemaOf, RECORDS_TABLE, STEPS_TABLE } from '../prisma/records-table.js';
import { redactSecretsOf, redactUrlsIn } from '../prisma/redact.js';
import { recordStats, stuckRecords } from '../prisma/stats.js';
import { type SweepProgress, sweepExpired } from '../prisma/sweep.js';

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

/** Options every command takes. */
interface DatabaseOptions {
  databaseUrl?: string;
  /** Not on `migrate`. */
  table?: string;
  json?: boolean;
}

/** What a command works on: the database, its provider and the records table. */
interface Target {
  db: PrismaQueryable;
  provider: Provider;
  /** `name` or `schema.name`, as the store's `table` option takes it. */
  table: string;
  /** The connected driver adapter, for `migrate`. */
  adapter: SqlDriverAdapterLike & MigrationTarget;
}

const program = new Command('idempotent-mutations')
  .description('Create and maintain the records table of idempotent-mutations (idempotency_records).')
  .version(version)
  // Set before the commands are added: each takes the program's output settings when created.
  .configureOutput({ writeErr: (text) => process.stderr.write(hideCredentials(text)) })
  .showHelpAfterError('(add --help for usage)')
  .addHelpText(
    'after',
    '\nThe database URL picks the driver: file:./dev.db (SQLite), postgresql://…, cockroachdb://… (CockroachDB), mysql://… or mariadb://….\n' +
      "Expiry and leases are judged by the database's clock, not this machine's.",
  );

withDatabaseOptions(
  program
    .command('migrate')
    .description(
      "Create the table: apply the package's SQL migrations for the URL's database that it has not recorded yet (in _prisma_migrations, as prisma migrate does). Needs no Prisma schema engine.",
    )
    .option('--print', 'print the SQL instead of applying it (no connection is made)')
    .option(
      '--migrations <folder>',
      "also your app's own migrations, laid out as prisma migrate does (<folder>/<name>/migration.sql), in name order with the package's",
    )
    .addOption(
      new Option('--provider <provider>', 'with --print and no URL: the SQL of this provider').choices([
        'postgresql',
        'cockroachdb',
        'mysql',
        'sqlite',
      ]),
    ),
  // The migrations create the tables under their own names: a --table would be ignored.
  { table: false },
).action(async (options: DatabaseOptions & { print?: boolean; provider?: Provider; migrations?: string }) => {
  if (options.provider !== undefined && !options.print) {
    // The database's own provider decides what is applied: another one's SQL would be ignored.
    process.stderr.write(
      'idempotent-mutations: --provider goes with --print only; migrate applies the migrations of the database the URL names\n',
    );
    process.exitCode = 1;
    return;
  }
  if (options.print) {
    try {
      const url = options.databaseUrl;
      const provider = options.provider ?? (url ? providerOfUrl(url) : undefined);
      if (!provider)
        throw new Error('no database URL: pass --database-url, set DATABASE_URL or pass --provider');
      const migrations = await migrationsToApply(provider, options.migrations);
      if (options.json) return print({ migrations });
      return print(migrations.map(({ name, sql }) => `-- ${name}\n${sql.trimEnd()}\n`).join('\n'));
    } catch (error) {
      process.stderr.write(`idempotent-mutations: ${describe(error, options.databaseUrl)}\n`);
      process.exitCode = 1;
      return;
    }
  }
  let migrations: Migration[] = [];
  await withDatabase(
    options,
    async ({ provider, adapter }) => {
      const applied = await applyMigrations(adapter, provider, migrations);
      if (options.json) return print({ applied });
      print(
        applied.length ? `Applied ${applied.join(', ')}.` : 'Up to date: every migration was applied before.',
      );
    },
    {
      createSqliteFile: true,
      // Read before connecting: a folder that is not there must not leave a new SQLite file behind.
      prepare: async (provider) => {
        migrations = await migrationsToApply(provider, options.migrations);
      },
    },
  );
});

withDatabaseOptions(
  program
    .command('sweep')
    .description(
      'Delete expired records, in batches (a lease still running is never deleted), then the expired steps whose record is gone.',
    )
    .addOption(
      new Option('--batch-size <n>', `records deleted per statement, at most ${MAX_BATCH_SIZE}`)
        .argParser(positiveInteger(MAX_BATCH_SIZE))
        .default(1_000),
    )
    .addOption(
      new Option(
        '--max-batches <n>',
        "stop after this many batches, the records' and then the steps' together (default: until done)",
      ).argParser(positiveInteger()),
    )
    .option('--no-progress', 'no progress line on stderr'),
).action((options: DatabaseOptions & { batchSize: number; maxBatches?: number; progress: boolean }) =>
  withDatabase(options, async ({ db, provider, table }) => {
    const stopping = new AbortController();
    // Ctrl-C, or a service manager stopping it (systemd, a container's stop): the same clean stop,
    // exiting 128 + the signal's number; a second signal ends it at once.
    let exitCode = 130;
    const interrupt = (signal: NodeJS.Signals) => {
      const code = signal === 'SIGTERM' ? 143 : 130;
      if (stopping.signal.aborted) process.exit(code);
      exitCode = code;
      stopping.abort();
      process.stderr.write('Stopping after the current batch…\n');
    };
    process.on('SIGINT', interrupt);
    process.on('SIGTERM', interrupt);
    const progress = options.progress ? progressLine() : undefined;
    let batches = 0;
    let steps = 0;
    try {
      const deleted = await sweepExpired(db, {
        provider,
        table,
        batchSize: options.batchSize,
        maxBatches: options.maxBatches,
        signal: stopping.signal,
        onBatch: (at) => {
          ({ batches, steps } = at);
          progress?.update(at);
        },
      });
      progress?.end();
      const interrupted = stopping.signal.aborted;
      if (interrupted) process.exitCode = exitCode;
      if (options.json) return print({ deleted, steps, batches, interrupted });
      const stepsDeleted = steps > 0 ? ` and ${count(steps, 'expired step')} whose record is gone` : '';
      print(
        `Deleted ${count(deleted, 'expired record')}${stepsDeleted} in ${count(batches, 'batch', 'batches')}${interrupted ? ' (interrupted)' : ''}.`,
      );
    } finally {
      process.off('SIGINT', interrupt);
      process.off('SIGTERM', interrupt);
    }
  }),
);

withDatabaseOptions(
  program
    .command('stats')
    .description(
      'Count records by status, with the oldest and newest, expired ones not yet swept and in-progress ones past their lease.',
    ),
).action((options: DatabaseOptions) =>
  withDatabase(options, async ({ db, provider, table }) => {
    const stats = await recordStats(db, { provider, table });
    if (options.json) return print(stats);
    const date = (value: Date | null) => value?.toISOString() ?? '-';
    print(
      [
        `Records                        ${stats.total}`,
        `  completed                    ${stats.completed}`,
        `  in progress                  ${stats.inProgress}`,
        `Oldest record created          ${date(stats.oldestCreatedAt)}`,
        `Newest record created          ${date(stats.newestCreatedAt)}`,
        `Expired, not yet swept         ${stats.expired}`,
        `In progress past their lease   ${stats.stuck}`,
      ].join('\n'),
    );
  }),
);

withDatabaseOptions(
  program
    .command('stuck')
    .description(
      'List in-progress records past their lease (oldest first): their request died or outlived the lease; with the last durable step each reached.',
    )
    .addOption(new Option('--limit <n>', 'list at most this many').argParser(positiveInteger()).default(100)),
).action((options: DatabaseOptions & { limit: number }) =>
  withDatabase(options, async ({ db, provider, table }) => {
    const stuck = await stuckRecords(db, { provider, table, limit: options.limit });
    if (options.json) return print(stuck);
    if (stuck.length === 0) return print('No in-progress records past their lease.');
    print(
      stuck
        .map(
          (r) =>
            `${printable(r.scope)}\t${printable(r.key)}\t${printable(r.operation)}\tcreated ${r.createdAt.toISOString()}\t` +
            `lease ended ${r.lockedUntil?.toISOString() ?? 'never set'}\texpires ${r.expiresAt.toISOString()}\t` +
            // Positions may skip (a step whose fn failed stored nothing): the count is of those stored.
            (r.steps.length
              ? `last step "${printable(r.steps.at(-1)!)}" (${r.steps.length} stored)`
              : 'no steps'),
        )
        .join('\n'),
    );
  }),
);

/**
 * `text` (a scope, a key: what clients chose) as a line of the terminal can show it: control
 * characters (a tab, a newline, the escape that starts a terminal's control sequence), the marks
 * that reorder text (bidirectional controls) or break a line (U+2028, U+2029), and `\` as escapes,
 * so no value can change the terminal or forge a column or a line.
 */
function printable(text: string): string {
  return text.replace(
    /[\\\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g,
    (character) =>
      character === '\\' ? '\\\\' : `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** The package's migrations for the provider, and those of `folder` (the app's own), in name order. */
async function migrationsToApply(provider: Provider, folder: string | undefined): Promise<Migration[]> {
  const shipped = await readMigrations(shippedMigrationsFolder(provider));
  const own = folder ? await readMigrations(`${resolve(folder)}/`) : [];
  // The package's own folder copied into the app's migrations (the prisma migrate way) counts once.
  const names = new Set(shipped.map((migration) => migration.name));
  return inNameOrder([...shipped, ...own.filter((migration) => !names.has(migration.name))]);
}

/** Adds `--database-url`, `--table` (unless `table: false`) and `--json` to `command`. */
function withDatabaseOptions(command: Command, { table = true } = {}): Command {
  command.addOption(
    new Option('--database-url <url>', 'the database (file:, postgresql://, cockroachdb://, mysql://)').env(
      'DATABASE_URL',
    ),
  );
  if (table) {
    command.option(
      '--table <name>',
      `the records table, name or schema.name (default: ${RECORDS_TABLE}, in the URL's ?schema= if any)`,
    );
  }
  return command.option('--json', 'machine-readable output on stdout');
}

/**
 * What commander writes to stderr, without any credential: its messages repeat the arguments as
 * given (`unknown option '--database_url=postgresql://app:…@db/app'`, `unknown command 'mysql://…'`).
 * Each URL of the command line is hidden as a whole, even one with a space in its password, and
 * any other word that looks like a URL is redacted.
 */
function hideCredentials(text: string): string {
  const urls = process.argv.slice(2).flatMap((arg) => /[a-z][a-z0-9+.-]*:\/\/.*/is.exec(arg)?.[0] ?? []);
  return redactUrlsIn(urls.reduce((hidden, url) => redactSecretsOf(url, hidden), text));
}

/** Connects to the URL's database, runs `work`, disconnects; any failure becomes one line and exit 1. */
async function withDatabase(
  options: DatabaseOptions,
  work: (target: Target) => Promise<void>,
  {
    createSqliteFile = false,
    prepare,
  }: { createSqliteFile?: boolean; prepare?: (provider: Provider) => Promise<void> } = {},
): Promise<void> {
  const url = options.databaseUrl;
  let failed = false;
  /** The command's failure, one line: the first error only. */
  const fail = (error: unknown) => {
    if (!failed) process.stderr.write(`idempotent-mutations: ${describe(error, url, options.table)}\n`);
    failed = true;
    process.exitCode = 1;
  };
  // The mariadb driver rejects a promise nobody holds for each connection whose `initSql` the
  // server refuses, besides the one its caller holds, and its pool goes on retrying until its
  // acquire timeout: Node would print the whole stack. A driver's error that reaches none of our
  // promises ends the command, in one line.
  process.on('unhandledRejection', (error) => {
    fail(error);
    process.exit(1);
  });
  try {
    if (!url) throw new Error('no database URL: pass --database-url or set DATABASE_URL');
    const provider = providerOfUrl(url);
    await prepare?.(provider);
    if (provider === 'sqlite') {
      const file = sqliteFileOfUrl(url);
      if (file === ':memory:') {
        throw new Error('an in-memory SQLite database (:memory:) ends with the command: give a file path');
      }
      // better-sqlite3 would create a missing file and then report a missing table.
      if (createSqliteFile) mkdirSync(dirname(file), { recursive: true });
      else if (!existsSync(file)) throw new Error(`no SQLite database at ${file}`);
    }
    if (provider === 'mysql') await checkMariaDbLogin(url);
    // adapterForUrl gives up on a PostgreSQL server that accepts and never answers (10 s by default).
    const factory = await adapterForUrl(url);
    const adapter = (await factory.connect()) as SqlDriverAdapterLike & MigrationTarget;
    try {
      // A bare table name lives where the adapter puts the models: ?schema= on PostgreSQL.
      const schema = connectedSchemaOf(adapter, provider);
      const table = options.table ?? RECORDS_TABLE;
      await work({
        db: queryableOf(adapter),
        provider,
        table: schema && !table.includes('.') ? `${schema}.${table}` : table,
        adapter,
      });
    } finally {
      await adapter.dispose().catch(() => undefined);
    }
  } catch (error) {
    fail(error);
  }
}

/**
 * Logs in to MariaDB once, on a connection of its own, before the pool does. The driver's pool
 * tries a refused login again and again until its acquire timeout (20 s, 14 failed logins for one
 * `stats`), which locks the account for every app server where the server limits failed logins
 * (`max_password_errors`). Skipped where the driver cannot be loaded or the URL does not parse: the
 * adapter then reports the problem itself.
 */
async function checkMariaDbLogin(url: string): Promise<void> {
  const mariadb = mariadbDriver();
  if (!mariadb || !URL.canParse(url)) return;
  // The URL as @prisma/adapter-mariadb hands it to the driver: a mariadb: scheme, and an IPv6
  // host unbracketed and percent-encoded, the only way the driver parses one.
  const driverUrl = new URL(url);
  driverUrl.protocol = 'mariadb:';
  if (driverUrl.hostname.startsWith('[')) {
    driverUrl.hostname = encodeURIComponent(driverUrl.hostname.slice(1, -1));
  }
  let connection: Awaited<ReturnType<typeof mariadb.createConnection>>;
  try {
    connection = await mariadb.createConnection(driverUrl.toString());
  } catch (error) {
    if (loginRefusal(error, url) !== undefined) throw error;
    // Not a login the server refused: a server it could not reach, or not as the URL asks (TLS).
    throw new IdempotencyStoreUnavailableError('The MariaDB server could not be reached', { cause: error });
  }
  await connection.end();
}

/** The `mariadb` driver that @prisma/adapter-mariadb uses, if both are installed. */
function mariadbDriver(): typeof import('mariadb') | undefined {
  try {
    // From the adapter's folder: with a strict package layout only the adapter can load it.
    const adapter = createRequire(import.meta.url).resolve('@prisma/adapter-mariadb');
    return createRequire(adapter)('mariadb') as typeof import('mariadb');
  } catch {
    return undefined;
  }
}

/** MariaDB's errors for a login it refused, and what each means of the URL (`target`). */
const LOGIN_REFUSALS = new Map<number, (target: string) => string>([
  // ER_DBACCESS_DENIED_ERROR
  [1044, (target) => `the server refused the user of ${target} access to its database`],
  // ER_ACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR
  [1045, (target) => `the server refused the credentials of ${target}`],
  [1698, (target) => `the server refused the credentials of ${target}`],
  // ER_BAD_DB_ERROR
  [1049, (target) => `the database of ${target} does not exist`],
  // ER_USER_IS_BLOCKED: max_password_errors reached
  [4150, (target) => `the server blocked the user of ${target} after too many failed logins`],
]);

/** What MariaDB refused of the URL's login, in words, if that is what `error` is. */
function loginRefusal(error: unknown, url: string | undefined): string | undefined {
  const refused = causeWhere(error, ({ errno }) => typeof errno === 'number' && LOGIN_REFUSALS.has(errno));
  if (refused === undefined) return undefined;
  const words = LOGIN_REFUSALS.get(refused.errno as number)!;
  return `${words(url ? redact(url) : 'the database URL')}: ${String(refused.sqlMessage)}`;
}

/** The shipped migrations that create the records table and the steps table. */
const RECORDS_MIGRATION = '20261121000000_idempotency_records';
const STEPS_MIGRATION = '20261130000000_idempotency_steps';

/** One line saying what went wrong, without any credential of the URL. */
function describe(error: unknown, url: string | undefined, table = RECORDS_TABLE): string {
  const line = explain(error, url, table);
  return url ? redactSecretsOf(url, line) : line;
}

function explain(error: unknown, url: string | undefined, table: string): string {
  const text = innermostMessage(error);
  if (causeWhere(error, (node) => node.code === 'ERR_INVALID_URL')) {
    // Its text cannot be shown: where the password ends is what did not parse.
    return 'the database URL (--database-url, or DATABASE_URL) does not parse: percent-encode any #, /, ?, @, % or space in its user name and password (encodeURIComponent)';
  }
  const refusal = loginRefusal(error, url);
  if (refusal) return refusal;
  if (error instanceof IdempotencyStoreUnavailableError || isConnectionError(error)) {
    return `cannot reach ${url ? redact(url) : 'the database'}: ${socketWords(text)}`;
  }
  const tableName = table.split('.').at(-1) ?? table;
  // A name as a whole word of the message: `idempotency` is not named by `idempotency_steps`.
  const names = (name: string) => namesWord(text, name);
  if (!names(tableName) && !names(STEPS_TABLE)) return text;
  // The folder of the package as installed (node_modules/idempotent-mutations/prisma/…).
  const folder = url
    ? shippedMigrationsFolder(providerOfUrl(url))
    : `${shippedPrismaFolder}<provider>/migrations/`;
  if (/already exists/i.test(text)) {
    const migration = names(STEPS_TABLE) ? STEPS_MIGRATION : RECORDS_MIGRATION;
    return `${text} (the table is there, but _prisma_migrations does not record the migration that creates it, ${migration}, which ran again: the table was made another way, such as prisma db push; record that migration as applied rather than run it: copy ${folder}${migration} into your prisma/migrations and run npx prisma migrate resolve --applied ${migration})`;
  }
  if (/not exist|doesn't exist|no such table/i.test(text)) {
    // migrate creates the tables under their own names only: a renamed one is the user's to create.
    if (tableName !== RECORDS_TABLE && names(tableName)) {
      return `${text} (create it as the migration ${RECORDS_MIGRATION} in ${folder} creates idempotency_records, under the name ${table}: idempotent-mutations migrate creates idempotency_records only)`;
    }
    return `${text} (create the table: idempotent-mutations migrate, or apply the migrations in ${folder})`;
  }
  return text;
}

/** The first of `error` and the errors in its `cause` chain that `matches` accepts. */
function causeWhere(
  error: unknown,
  matches: (node: Record<string, unknown>) => boolean,
): Record<string, unknown> | undefined {
  for (let node = error, depth = 0; typeof node === 'object' && node !== null && depth < 8; depth++) {
    if (matches(node as Record<string, unknown>)) return node as Record<string, unknown>;
    node = (node as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * A socket's failure as Node words it (MariaDB's driver passes it on), in the words PostgreSQL's
 * adapter gets: `connect ECONNREFUSED host:port`, `getaddrinfo ENOTFOUND host`.
 */
function socketWords(text: string): string {
  const refused = /^connect ECONNREFUSED (\S+)$/.exec(text);
  if (refused) return `nothing answers at ${refused[1]}`;
  const unknown = /^getaddrinfo ENOTFOUND (\S+)$/.exec(text);
  return unknown ? `the host name ${unknown[1]} does not resolve` : text;
}

/** Whether `text` holds `name` with no letter, digit, `_` or `$` either side of it. */
function namesWord(text: string, name: string): boolean {
  const word = /[\w$]/;
  for (let at = text.indexOf(name); at !== -1; at = text.indexOf(name, at + 1)) {
    if (!word.test(text[at - 1] ?? '') && !word.test(text[at + name.length] ?? '')) return true;
  }
  return false;
}

/**
 * The most specific message in an error's chain, first line only: through the wrappers that add
 * nothing (our store-unavailable error, a driver adapter's error, an `AggregateError`) down to the
 * database's or the socket's own words.
 */
function innermostMessage(error: unknown): string {
  let found = String(error);
  for (let current = error, depth = 0; current && depth < 8; depth++) {
    if (typeof current === 'string') return firstLine(current) ?? found;
    const node = current as Record<string, unknown>;
    if (node.kind === 'DatabaseNotReachable' && node.host) {
      // `@prisma/adapter-pg` gives a port only for a refused connection, none for a name that
      // does not resolve (ENOTFOUND).
      const host = String(node.host);
      found = host.startsWith('/')
        ? `nothing answers at ${host}` // a Unix socket's path
        : node.port === undefined
          ? `the host name ${host} does not resolve`
          : `nothing answers at ${host}:${String(node.port)}`;
    } else if (node.kind === 'TlsConnectionError' && typeof node.reason === 'string') {
      found = `TLS failed: ${firstLine(node.reason) ?? node.reason}`;
    } else {
      const line = firstLine(node.originalMessage ?? node.message);
      // A bare kind name ("DatabaseNotReachable") says less than what lies beneath it.
      if (line && !/^[A-Z][A-Za-z]+$/.test(line)) found = line;
    }
    const wrapper =
      !(current instanceof Error) ||
      current instanceof IdempotencyStoreUnavailableError ||
      current instanceof AggregateError ||
      current.name === 'DriverAdapterError';
    if (!wrapper) break;
    current = (Array.isArray(node.errors) ? node.errors[0] : undefined) ?? node.cause;
  }
  return found;
}

function firstLine(text: unknown): string | undefined {
  return typeof text === 'string'
    ? text
        .split('\n')
        .map((line) => line.trim())
        .find(Boolean)
    : undefined;
}

/** Progress on stderr: a line rewritten in place on a terminal, otherwise a line a second at most. */
function progressLine(stream: NodeJS.WriteStream = process.stderr) {
  let lastAt = 0;
  let shown = false;
  return {
    update({ batches, deleted, steps, more }: SweepProgress) {
      if (!more) return;
      const stepsDeleted = steps > 0 ? ` and ${count(steps, 'step')}` : '';
      const line = `Sweeping: ${count(deleted, 'record')}${stepsDeleted} deleted in ${count(batches, 'batch', 'batches')}…`;
      if (stream.isTTY) {
        stream.write(`\r${line}`);
      } else if (!shown || Date.now() - lastAt >= 1_000) {
        stream.write(`${line}\n`);
        lastAt = Date.now();
      }
      shown = true;
    },
    end() {
      if (shown && stream.isTTY) stream.write('\n');
    },
  };
}

function print(value: unknown): void {
  process.stdout.write(`${typeof value === 'string' ? value : JSON.stringify(value, null, 2)}\n`);
}

function count(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** A parser of positive integers up to `max`, for `argParser`. */
function positiveInteger(max = Number.MAX_SAFE_INTEGER): (text: string) => number {
  // A parser of the text alone: commander passes the option's previous value (its default) second.
  return (text) => {
    const value = Number(text);
    if (!Number.isSafeInteger(value) || value < 1 || value > max) {
      throw new InvalidArgumentError(
        max === Number.MAX_SAFE_INTEGER
          ? 'expected a positive integer'
          : `expected an integer from 1 to ${max}`,
      );
    }
    return value;
  };
}

await program.parseAsync();
