import { execFile, spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { databaseNow } from '../helpers/database-time.js';
import { connect, databases, describeEachDatabase } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';
import {
  everyStateCounts,
  recordsInEveryState,
  storedKeys,
  stuckKeys,
  unsweptKeys,
} from '../helpers/record-states.js';
import {
  copyRecordsTable,
  countRecords,
  insertRecords,
  insertSteps,
  type RecordRow,
} from '../helpers/records.js';
import { sqliteTimestampFormats, writeRecordsAs } from '../helpers/sqlite-timestamps.js';

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs the CLI as a user would: its own process, its own exit code. `clockShiftMs` moves that
 * process's clock (see `shifted-clock.ts`).
 */
function cli(args: string[], env: Record<string, string> = {}, clockShiftMs = 0): Promise<Outcome> {
  const { DATABASE_URL: _inherited, ...parentEnv } = process.env;
  const shifted = clockShiftMs
    ? {
        node: ['--import', './test/helpers/shifted-clock.ts'],
        env: { TEST_CLOCK_SHIFT_MS: String(clockShiftMs) },
      }
    : { node: [], env: {} };
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', ...shifted.node, 'src/cli/index.ts', ...args],
      { env: { ...parentEnv, ...env, ...shifted.env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

const DAY = 86_400_000;
const at = (iso: string) => new Date(iso);
/** Whole seconds, which every SQLite timestamp format holds exactly. */
const wholeSecond = (ms: number) => Math.floor(ms / 1_000) * 1_000;
const hourAgo = () => new Date(Date.now() - 3_600_000);
const inAnHour = () => new Date(Date.now() + 3_600_000);

// `sweep` and `stats` see the whole table: each database gets a schema, database or file of its own.
describeEachDatabase('the idempotent-mutations CLI', (shared) => {
  let isolated: IsolatedDatabase;
  let prisma: Awaited<ReturnType<typeof connect>>;
  let url: string;
  const { provider } = shared;

  beforeAll(async () => {
    isolated = await isolatedDatabase(shared);
    url = isolated.db.url!;
    prisma = await connect(isolated.db);
  });
  afterAll(async () => {
    await prisma?.$disconnect();
    await isolated?.drop();
  });
  beforeEach(async () => {
    await prisma.$executeRawUnsafe('DELETE FROM idempotency_records');
    await prisma.$executeRawUnsafe('DELETE FROM idempotency_steps');
  });

  it('sweeps expired records in batches, with a progress line on stderr, and leaves live ones', async () => {
    await insertRecords(prisma, provider, [
      ...Array.from({ length: 2_500 }, (_, i) => ({ scope: 'u', key: `old-${i}`, expiresAt: hourAgo() })),
      ...Array.from({ length: 3 }, (_, i) => ({ scope: 'u', key: `live-${i}`, expiresAt: inAnHour() })),
      {
        scope: 'u',
        key: 'leased',
        status: 'IN_PROGRESS' as const,
        ownerToken: 'a'.repeat(64),
        lockedUntil: inAnHour(),
        expiresAt: hourAgo(),
      },
    ]);
    const { code, stdout, stderr } = await cli(['sweep', '--batch-size', '1000', '--database-url', url]);
    expect({ code, stdout }).toEqual({ code: 0, stdout: 'Deleted 2500 expired records in 3 batches.\n' });
    expect(stderr).toContain('Sweeping: 1000 records deleted in 1 batch…');
    expect(await countRecords(prisma, provider, 'u')).toBe(4);
  });

  it('takes the URL from DATABASE_URL and reports a sweep as JSON', async () => {
    await insertRecords(prisma, provider, [
      ...Array.from({ length: 5 }, (_, i) => ({ scope: 'u', key: `old-${i}`, expiresAt: hourAgo() })),
    ]);
    const { code, stdout } = await cli(['sweep', '--json', '--max-batches', '1'], { DATABASE_URL: url });
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual({ deleted: 5, steps: 0, batches: 1, interrupted: false });
    expect(await countRecords(prisma, provider, 'u')).toBe(0);
  });

  it('spends what --max-batches leaves after the records on the expired steps, and counts them', async () => {
    // Five expired steps whose record is gone, and no record: batches of 2, at most 2 of them.
    await insertSteps(prisma, provider, 's', 'gone', ['a', 'b', 'c', 'd', 'e'], hourAgo());
    const args = ['sweep', '--batch-size', '2', '--max-batches', '2', '--no-progress', '--database-url', url];
    expect(await cli(args)).toEqual({
      code: 0,
      stdout: 'Deleted 0 expired records and 4 expired steps whose record is gone in 2 batches.\n',
      stderr: '',
    });
    expect(await countSteps()).toBe(1);
    const json = await cli([...args, '--json']);
    expect(JSON.parse(json.stdout)).toEqual({ deleted: 0, steps: 1, batches: 1, interrupted: false });
    expect(await countSteps()).toBe(0);
  });

  it('leaves the expired steps for the next sweep when the records spent --max-batches', async () => {
    await insertRecords(prisma, provider, [
      ...Array.from({ length: 3 }, (_, i) => ({ scope: 'u', key: `old-${i}`, expiresAt: hourAgo() })),
    ]);
    await insertSteps(prisma, provider, 's', 'gone', ['a'], hourAgo());
    const { code, stdout } = await cli([
      'sweep',
      '--batch-size',
      '1',
      '--max-batches',
      '3',
      '--database-url',
      url,
    ]);
    expect({ code, stdout }).toEqual({
      code: 0,
      stdout: 'Deleted 3 expired records in 3 batches.\n',
    });
    expect(await countSteps()).toBe(1);
  });

  async function countSteps(): Promise<number> {
    const [row] = await prisma.$queryRawUnsafe<{ n: unknown }[]>(
      'SELECT COUNT(*) AS n FROM idempotency_steps',
    );
    return Number(row!.n);
  }

  it('reports stats as JSON and as a table', async () => {
    await insertRecords(prisma, provider, [
      { scope: 'a', key: 'done', createdAt: at('2020-01-01T00:00:00Z'), expiresAt: inAnHour() },
      { scope: 'a', key: 'expired', createdAt: at('2020-01-02T00:00:00Z'), expiresAt: hourAgo() },
      {
        scope: 'b',
        key: 'stuck',
        status: 'IN_PROGRESS',
        ownerToken: 'b'.repeat(64),
        createdAt: at('2020-01-03T00:00:00Z'),
        lockedUntil: hourAgo(),
        expiresAt: inAnHour(),
      },
    ]);
    const json = await cli(['stats', '--json', '--database-url', url]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({
      total: 3,
      inProgress: 1,
      completed: 2,
      oldestCreatedAt: '2020-01-01T00:00:00.000Z',
      newestCreatedAt: '2020-01-03T00:00:00.000Z',
      expired: 1,
      stuck: 1,
    });
    const table = await cli(['stats', '--database-url', url]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^Records +3$/m);
    expect(table.stdout).toMatch(/^Oldest record created +2020-01-01T00:00:00.000Z$/m);
    expect(table.stdout).toMatch(/^In progress past their lease +1$/m);
  });

  it('lists in-progress records past their lease, and says so when there are none', async () => {
    expect(await cli(['stuck', '--database-url', url])).toMatchObject({
      code: 0,
      stdout: 'No in-progress records past their lease.\n',
    });
    const lockedUntil = hourAgo();
    await insertRecords(prisma, provider, [
      {
        scope: 'b',
        key: 'stuck',
        status: 'IN_PROGRESS',
        ownerToken: 'b'.repeat(64),
        createdAt: at('2020-01-03T00:00:00Z'),
        lockedUntil,
        expiresAt: at('2100-01-01T00:00:00Z'),
      },
      {
        scope: 'b',
        key: 'running',
        status: 'IN_PROGRESS',
        ownerToken: 'c'.repeat(64),
        lockedUntil: inAnHour(),
        expiresAt: at('2100-01-01T00:00:00Z'),
      },
    ]);
    await insertSteps(prisma, provider, 'b', 'stuck', ['reserve', 'charge']);
    await insertSteps(prisma, provider, 'b', 'running', ['reserve']);
    const { code, stdout } = await cli(['stuck', '--json', '--database-url', url]);
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual([
      {
        scope: 'b',
        key: 'stuck',
        operation: 'test.op',
        createdAt: '2020-01-03T00:00:00.000Z',
        lockedUntil: lockedUntil.toISOString(),
        expiresAt: '2100-01-01T00:00:00.000Z',
        steps: ['reserve', 'charge'],
      },
    ]);
    const table = await cli(['stuck', '--database-url', url]);
    expect(table.stdout).toMatch(/^b\tstuck\ttest\.op\t.*\tlast step "charge" \(2 stored\)$/m);
  });

  it('lists a scope a client chose with its control characters escaped: one line, no terminal sequence', async () => {
    // A principal's id that sets the window title, clears the screen and forges a line of its own.
    const scope = 'tenant-\u001b]0;pwned\u0007\u001b[2J\nforged\tforged-key\\\u202e';
    await insertRecords(prisma, provider, [
      {
        scope,
        key: 'k-1',
        status: 'IN_PROGRESS',
        ownerToken: 'd'.repeat(64),
        lockedUntil: hourAgo(),
        expiresAt: inAnHour(),
      },
    ]);
    const { code, stdout } = await cli(['stuck', '--database-url', url]);
    expect(code).toBe(0);
    expect(stdout).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f]/);
    expect(stdout.trimEnd().split('\n')).toHaveLength(1);
    expect(stdout).toContain(
      'tenant-\\u001b]0;pwned\\u0007\\u001b[2J\\u000aforged\\u0009forged-key\\\\\\u202e\tk-1\t',
    );
    // As JSON, as it is.
    expect(JSON.parse((await cli(['stuck', '--json', '--database-url', url])).stdout)[0].scope).toBe(scope);
  });

  it('lists no steps for a stuck record whose stored steps the next request would clear', async () => {
    const stuck = (key: string, fingerprint = '0'.repeat(64)) => ({
      scope: 'c',
      key,
      status: 'IN_PROGRESS' as const,
      ownerToken: 'c'.repeat(64),
      lockedUntil: hourAgo(),
      expiresAt: inAnHour(),
      fingerprint,
    });
    // An earlier call's steps: of another input, or expired (its record expired and was taken over).
    await insertRecords(prisma, provider, [stuck('other-input', '1'.repeat(64)), stuck('expired-steps')]);
    await insertSteps(prisma, provider, 'c', 'other-input', ['reserve', 'charge']);
    await insertSteps(prisma, provider, 'c', 'expired-steps', ['reserve'], hourAgo());
    const { stdout } = await cli(['stuck', '--json', '--database-url', url]);
    expect(JSON.parse(stdout).map((r: { key: string; steps: string[] }) => [r.key, r.steps])).toEqual([
      ['other-input', []],
      ['expired-steps', []],
    ]);
  });

  it('lists more than 100 stuck records when --limit asks for them', async () => {
    await insertRecords(
      prisma,
      provider,
      Array.from({ length: 101 }, (_, i) => ({
        scope: 'd',
        key: `stuck-${i}`,
        status: 'IN_PROGRESS' as const,
        ownerToken: 'd'.repeat(64),
        lockedUntil: hourAgo(),
        expiresAt: inAnHour(),
      })),
    );
    const { code, stdout } = await cli(['stuck', '--json', '--limit', '101', '--database-url', url]);
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toHaveLength(101);
  });
  it.each([
    ['a day behind', -DAY],
    ['a day ahead', DAY],
  ])('counts, lists and sweeps by the database’s clock with its own clock %s', async (_, shift) => {
    const now = await databaseNow(prisma, provider);
    const rows = recordsInEveryState(now, now - 30 * DAY);
    await insertRecords(prisma, provider, rows);
    await expectEveryStateReported(url, rows, shift);
    expect(await storedKeys(prisma)).toEqual([...unsweptKeys].sort());
  });

  it('creates the table with migrate, records it, and finds nothing left to do the second time', async () => {
    await prisma.$executeRawUnsafe('DROP TABLE idempotency_records');
    await prisma.$executeRawUnsafe(
      "DELETE FROM _prisma_migrations WHERE migration_name LIKE '%_idempotency_records'",
    );
    const first = await cli(['migrate', '--json', '--database-url', url]);
    expect({ code: first.code, stderr: first.stderr }).toEqual({ code: 0, stderr: '' });
    expect(JSON.parse(first.stdout)).toEqual({ applied: ['20261121000000_idempotency_records'] });
    // The table is there and works: a record in it is counted.
    const now = await databaseNow(prisma, provider);
    await insertRecords(prisma, provider, recordsInEveryState(now, now - DAY));
    expect(JSON.parse((await cli(['stats', '--json', '--database-url', url])).stdout).total).toBe(
      everyStateCounts.total,
    );
    const second = await cli(['migrate', '--database-url', url]);
    expect(second).toEqual({
      code: 0,
      stdout: 'Up to date: every migration was applied before.\n',
      stderr: '',
    });
  });
});

/**
 * What `stats`, `stuck` and `sweep` report (as JSON) for the records of `recordsInEveryState`, in
 * a CLI whose own clock is `clockShiftMs` off.
 */
async function expectEveryStateReported(url: string, rows: RecordRow[], clockShiftMs = 0, sets = 1) {
  const run = async (args: string[]) => {
    const { code, stdout, stderr } = await cli([...args, '--json', '--database-url', url], {}, clockShiftMs);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    return JSON.parse(stdout);
  };
  const createdAt = rows.map((row) => row.createdAt!.getTime());
  expect(await run(['stats'])).toEqual({
    total: sets * everyStateCounts.total,
    completed: sets * everyStateCounts.completed,
    inProgress: sets * everyStateCounts.inProgress,
    expired: sets * everyStateCounts.expired,
    stuck: sets * everyStateCounts.stuck,
    oldestCreatedAt: new Date(Math.min(...createdAt)).toISOString(),
    newestCreatedAt: new Date(Math.max(...createdAt)).toISOString(),
  });
  const stuck = rows.filter((row) => stuckKeys.some((key) => row.key.endsWith(key)));
  expect((await run(['stuck'])).map((r: { key: string }) => r.key)).toEqual(stuck.map((row) => row.key));
  expect(await run(['sweep', '--no-progress'])).toEqual({
    deleted: sets * everyStateCounts.expired,
    steps: 0,
    batches: 1,
    interrupted: false,
  });
}

// An app whose SQLite adapter writes epoch milliseconds, next to one that writes ISO text, and
// column defaults that write `YYYY-MM-DD HH:MM:SS`: the CLI reads the file with the default adapter.
describe('the idempotent-mutations CLI on every SQLite timestamp format', () => {
  let isolated: IsolatedDatabase;
  let prisma: Awaited<ReturnType<typeof connect>>;

  beforeEach(async () => {
    isolated = await isolatedDatabase(databases[0]!);
    prisma = await connect(isolated.db);
  });
  afterEach(async () => {
    await prisma?.$disconnect();
    await isolated?.drop();
  });

  it.each(sqliteTimestampFormats)('counts, lists and sweeps records stored as %s', async (format) => {
    const now = Date.now();
    const rows = recordsInEveryState(now, wholeSecond(now) - 30 * DAY);
    await writeRecordsAs(isolated.db.url!, format, rows);
    await expectEveryStateReported(isolated.db.url!, rows);
    expect(await storedKeys(prisma)).toEqual([...unsweptKeys].sort());
  });

  it('counts, lists and sweeps a table that holds all three formats, in time order', async () => {
    const now = Date.now();
    // The oldest records are text and the newest integers, the opposite of SQLite's sort order.
    const sets = sqliteTimestampFormats.map((format, i) => ({
      format,
      rows: recordsInEveryState(now, wholeSecond(now) - (30 - 10 * i) * DAY, `${i}-`),
    }));
    for (const { format, rows } of sets) await writeRecordsAs(isolated.db.url!, format, rows);
    await expectEveryStateReported(
      isolated.db.url!,
      sets.flatMap(({ rows }) => rows),
      0,
      sets.length,
    );
    expect(await storedKeys(prisma)).toEqual(
      sets.flatMap((_, i) => unsweptKeys.map((key) => `${i}-${key}`)).sort(),
    );
  });
});

describe('the idempotent-mutations CLI interrupted', () => {
  it.each([
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const)(
    'stops a sweep after the batch in flight on %s, says so and exits %i',
    async (signal, exitCode) => {
      const isolated = await isolatedDatabase(databases[0]!);
      const prisma = await connect(isolated.db);
      try {
        const rows = Array.from({ length: 30_000 }, (_, i) => ({
          scope: 'u',
          key: `k-${i}`,
          expiresAt: hourAgo(),
        }));
        await insertRecords(prisma, 'sqlite', rows);
        const child = spawn(
          process.execPath,
          [
            '--import',
            'tsx',
            'src/cli/index.ts',
            'sweep',
            '--batch-size',
            '1',
            '--database-url',
            isolated.db.url!,
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (chunk) => (stdout += chunk));
        let interrupted = false;
        child.stderr.on('data', (chunk) => {
          stderr += chunk;
          // One Ctrl-C: a second one, once the sweep has finished, would meet no handler and kill it.
          if (!interrupted && stderr.includes('Sweeping:')) {
            interrupted = true;
            child.kill(signal);
          }
        });
        const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
        expect(code).toBe(exitCode);
        expect(stderr).toContain('Stopping after the current batch');
        const deleted = Number(
          /^Deleted (\d+) expired records in \d+ batches \(interrupted\)\.$/m.exec(stdout)?.[1],
        );
        expect(deleted).toBeGreaterThan(0);
        expect(await countRecords(prisma, 'sqlite', 'u')).toBe(30_000 - deleted);
      } finally {
        await prisma.$disconnect();
        await isolated.drop();
      }
    },
  );
});

describe('the idempotent-mutations CLI on bad input', () => {
  const mariadbUrl = databases.find((db) => db.provider === 'mysql')?.url;

  /** The error is one line on stderr, naming the problem, and the exit code is not 0. */
  function expectOneLineError(outcome: Outcome, pattern: RegExp) {
    expect(outcome.code).not.toBe(0);
    expect(outcome.stdout).toBe('');
    expect(outcome.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(outcome.stderr).toMatch(pattern);
  }

  it.each([
    [
      'an unsupported URL',
      ['stats', '--database-url', 'redis://default:hunter2@127.0.0.1:6379?password=hunter3'],
    ],
    [
      'a Prisma Postgres / Accelerate URL',
      ['stats', '--database-url', 'prisma+postgres://accelerate.prisma-data.net/?api_key=hunter2.jwt'],
    ],
    [
      'PostgreSQL’s ?password=',
      ['stats', '--database-url', 'postgresql://postgres@127.0.0.1:1/test?password=hunter2'],
    ],
    [
      'PostgreSQL’s ?sslpassword=',
      ['sweep', '--database-url', 'postgres://u:hunter3@127.0.0.1:1/t?sslpassword=hunter2'],
    ],
    [
      'a MariaDB password',
      [
        'stuck',
        '--database-url',
        'mariadb://root:hunter2@127.0.0.1:1/t?connectTimeout=500&acquireTimeout=1000',
      ],
    ],
    [
      'migrate --print of an unsupported URL',
      ['migrate', '--print', '--database-url', 'mongodb://u:hunter2@h/db'],
    ],
    // A generated password with an unencoded `/`, which the drivers misread as the host's end.
    [
      'a PostgreSQL password holding /',
      ['stats', '--database-url', 'postgresql://app:/hunter2@127.0.0.1:1/app'],
    ],
    [
      'a MariaDB password holding /',
      [
        'stats',
        '--database-url',
        'mariadb://app:/hunter2@127.0.0.1:1/t?connectTimeout=500&acquireTimeout=1000',
      ],
    ],
  ])('never echoes a credential of %s', async (_, args) => {
    const outcome = await cli(args);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toMatch(/^idempotent-mutations: .*\*\*\*/);
    expect(outcome.stdout + outcome.stderr).not.toMatch(/hunter/);
  });

  it.each([
    ['an unknown option', ['stats', '--database_url=postgresql://app:hunter2@db/app']],
    [
      'an unknown option with a secret parameter',
      ['stats', '--database_url=postgresql://db/app?sslpassword=hunter2'],
    ],
    [
      'an unknown option with a space in the password',
      ['stats', '--database_url=postgresql://app:hunter2 hunter3@db/app'],
    ],
    [
      'an unknown option with a / in the password',
      ['stats', '--database_url=postgresql://app:hun/ter2@db/app'],
    ],
    ['an unknown command', ['mysql://root:hunter2@db/app']],
    ['an invalid number', ['sweep', '--batch-size', 'mysql://root:hunter2@db/app']],
    ['an invalid choice', ['migrate', '--print', '--provider', 'mariadb://root:hunter2@db/app']],
  ])('never echoes a credential in the message about %s', async (_, args) => {
    const outcome = await cli(args);
    expect(outcome.code).toBe(1);
    expect(outcome.stdout).toBe('');
    expect(outcome.stderr).toMatch(/^error: .*\*\*\*/);
    expect(outcome.stderr).not.toMatch(/hunter/);
  });

  it('says a Prisma Postgres / Accelerate URL is no database connection, and what to pass instead', async () => {
    expectOneLineError(
      await cli(['stats', '--database-url', 'prisma+postgres://accelerate.prisma-data.net/?api_key=k']),
      /prisma\+postgres:\/\/ URL .* is not a database connection; use the database's direct postgresql:\/\//,
    );
  });

  it('rejects a URL of an unsupported scheme', async () => {
    expectOneLineError(
      await cli(['stats', '--database-url', 'redis://127.0.0.1:6379']),
      /^idempotent-mutations: Unsupported database URL redis:/,
    );
  });

  it('says it cannot reach a PostgreSQL server that does not answer, without the password', async () => {
    const outcome = await cli(['sweep', '--database-url', 'postgresql://postgres:hunter2@127.0.0.1:1/test']);
    expectOneLineError(outcome, /cannot reach postgresql:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/test/);
    expect(outcome.stderr).not.toContain('hunter2');
  });

  it('says why it cannot reach a PostgreSQL server whose host name does not resolve', async () => {
    expectOneLineError(
      await cli(['stats', '--database-url', 'postgresql://postgres@nonexistent.invalid:5432/test']),
      /cannot reach postgresql:\/\/postgres@nonexistent\.invalid:5432\/test: the host name nonexistent\.invalid does not resolve$/m,
    );
  });

  it('says a database URL that does not parse is to be percent-encoded, without showing it', async () => {
    const outcome = await cli(['stats', '--database-url', 'postgresql://app:pa#ss@127.0.0.1:1/app']);
    expectOneLineError(
      outcome,
      /: the database URL \(--database-url, or DATABASE_URL\) does not parse: percent-encode any #/,
    );
    expect(outcome.stderr).not.toContain('pa#ss');
  });

  it.each([
    ['nothing answers', 'mysql://app:hunter2@127.0.0.1:1/app', /: nothing answers at 127\.0\.0\.1:1$/m],
    [
      'its host name does not resolve',
      'mysql://app:hunter2@nonexistent.invalid:3306/app',
      /: the host name nonexistent\.invalid does not resolve$/m,
    ],
  ])('says in words that it cannot reach a MariaDB server: %s', async (_, url, pattern) => {
    const outcome = await cli(['stats', '--database-url', `${url}?connectTimeout=1000&acquireTimeout=2000`]);
    expectOneLineError(outcome, pattern);
    expect(outcome.stderr).not.toContain('hunter2');
  });

  it('says nothing answers at a Unix socket no server listens on', async () => {
    const folder = await mkdtemp(join(tmpdir(), 'im-socket-'));
    await writeFile(join(folder, '.s.PGSQL.5432'), ''); // left by a server that is gone
    try {
      expectOneLineError(
        await cli(['stats', '--database-url', `postgresql://postgres@localhost/test?host=${folder}`]),
        /: nothing answers at \/.*\/\.s\.PGSQL\.5432$/m,
      );
    } finally {
      await rm(folder, { recursive: true, force: true });
    }
  });

  it('says why it cannot reach a PostgreSQL server that speaks no TLS, when the URL asks for it', async () => {
    // Answers PostgreSQL's SSLRequest with "N", as a server without TLS does.
    const plain = createServer((socket) => socket.once('data', () => socket.end('N')));
    await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
    const { port } = plain.address() as AddressInfo;
    try {
      expectOneLineError(
        // verify-full: pg prints a warning for require, the alias it reads as verify-full.
        await cli([
          'stats',
          '--database-url',
          `postgresql://postgres@127.0.0.1:${port}/test?sslmode=verify-full`,
        ]),
        /cannot reach postgresql:\/\/postgres@127\.0\.0\.1:\d+\/test\?sslmode=verify-full: TLS failed: The server does not support SSL connections$/m,
      );
    } finally {
      plain.close();
    }
  });

  it('gives up on a PostgreSQL server that accepts and never answers after connect_timeout', async () => {
    const silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as AddressInfo;
    try {
      const started = Date.now();
      const outcome = await cli([
        'stats',
        '--database-url',
        `postgresql://postgres@127.0.0.1:${port}/test?connect_timeout=1`,
      ]);
      expectOneLineError(outcome, /cannot reach postgresql:\/\/postgres@127\.0\.0\.1:\d+\/test.*timeout/);
      expect(Date.now() - started).toBeLessThan(30_000);
    } finally {
      silent.close();
    }
  });

  it('rejects a connect_timeout that is not a number of seconds', async () => {
    expectOneLineError(
      await cli(['stats', '--database-url', 'postgresql://postgres@127.0.0.1:1/test?connect_timeout=soon']),
      /connect_timeout must be a number of seconds/,
    );
  });

  it.skipIf(!mariadbUrl)('says what MariaDB refused of a URL’s initSql, in one line', async () => {
    // The mariadb driver's pool rejects a promise no caller holds for each refused connection.
    const url = `${mariadbUrl}${mariadbUrl?.includes('?') ? '&' : '?'}initSql=SET/**/time_zone='%2B14:00'`;
    expectOneLineError(
      await cli(['stats', '--database-url', url]),
      /^idempotent-mutations: .*Error executing initial sql command: .*Unknown or incorrect time zone: '\+14:00'\n$/,
    );
  });

  describe.skipIf(!mariadbUrl)('a MariaDB login the server refuses', () => {
    const mariadb = databases.find((db) => db.provider === 'mysql')!;
    /** The test database's URL with `change` made to it. */
    const changed = (change: (url: URL) => void) => {
      const url = new URL(mariadbUrl!);
      change(url);
      return url.toString();
    };
    /** `stats` against `url`, and how long it took. */
    async function timedStats(url: string) {
      const started = Date.now();
      const outcome = await cli(['stats', '--database-url', url]);
      return { outcome, ms: Date.now() - started };
    }
    async function accessDeniedErrors(): Promise<number> {
      const prisma = await connect(mariadb);
      try {
        const [row] = await prisma.$queryRawUnsafe<{ Value: string }[]>(
          "SHOW GLOBAL STATUS LIKE 'Access_denied_errors'",
        );
        return Number(row!.Value);
      } finally {
        await prisma.$disconnect();
      }
    }

    it('says at once that the server refused the credentials, after one login, without the password', async () => {
      const before = await accessDeniedErrors();
      const { outcome, ms } = await timedStats(changed((url) => (url.password = 'hunter2')));
      expect(outcome.code).toBe(1);
      expectOneLineError(
        outcome,
        /^idempotent-mutations: the server refused the credentials of \w+:\/\/\w+:\*\*\*@[^:]+:\d+\/\w+: Access denied for user /,
      );
      expect(outcome.stderr).not.toContain('hunter2');
      // The driver's pool tried again until its acquire timeout: 20 s, 14 failed logins.
      expect(ms).toBeLessThan(10_000); // the CLI's start on a loaded machine included
      // One login (another test's refused login may land in between), not the pool's 14.
      expect((await accessDeniedErrors()) - before).toBeLessThan(3);
    });

    it('says at once that it cannot reach a server without the TLS the URL asks for', async () => {
      const { outcome, ms } = await timedStats(changed((url) => url.searchParams.set('ssl', 'true')));
      expect(outcome.code).toBe(1);
      expectOneLineError(outcome, /^idempotent-mutations: cannot reach \S+\?ssl=true: .*ssl/);
      expect(ms).toBeLessThan(10_000); // the CLI's start on a loaded machine included
    });

    it('says at once that the database does not exist', async () => {
      const { outcome, ms } = await timedStats(changed((url) => (url.pathname = '/no_such_database')));
      expect(outcome.code).toBe(1);
      expectOneLineError(
        outcome,
        /^idempotent-mutations: the database of \w+:\/\/\S+\/no_such_database does not exist: Unknown database 'no_such_database'$/m,
      );
      expect(ms).toBeLessThan(10_000); // the CLI's start on a loaded machine included
    });
  });

  it('asks for a URL when there is none', async () => {
    expectOneLineError(await cli(['stats']), /pass --database-url or set DATABASE_URL/);
  });

  it('refuses a missing SQLite file instead of creating one, and names a database without the table', async () => {
    expectOneLineError(await cli(['stats', '--database-url', 'file:.tmp/missing.db']), /no SQLite database/);
    await writeFile('.tmp/cli-empty.db', '');
    const outcome = await cli(['stuck', '--database-url', 'file:.tmp/cli-empty.db']);
    expectOneLineError(outcome, /idempotency_records.*create the table: idempotent-mutations migrate/);
    // The folder inside the package as installed, found from the running CLI, not a path of this repository.
    const folder = /apply the migrations in (\S+?)\)?$/.exec(outcome.stderr.trim())?.[1];
    expect(folder).toBe(`${resolve('prisma/sqlite/migrations')}/`);
    expect(readdirSync(folder!)).toEqual([
      '20261121000000_idempotency_records',
      '20261130000000_idempotency_steps',
      '20261201000000_idempotency_steps_expiry',
      'migration_lock.toml',
    ]);
  });

  it('names the migration to copy for a --table of another name, which migrate does not create', async () => {
    await rm('.tmp/cli-migrate/renamed.db', { force: true });
    expect((await cli(['migrate', '--database-url', 'file:.tmp/cli-migrate/renamed.db'])).code).toBe(0);
    const outcome = await cli([
      'stats',
      '--database-url',
      'file:.tmp/cli-migrate/renamed.db',
      '--table',
      'billing_idempotency',
    ]);
    expectOneLineError(
      outcome,
      /billing_idempotency.*create it as the migration 20261121000000_idempotency_records in \S+ creates idempotency_records, under the name billing_idempotency/,
    );
    expect(outcome.stderr).not.toContain('create the table: idempotent-mutations migrate');
  });

  it('says to run migrate for a missing idempotency_steps, whatever --table names', async () => {
    await rm('.tmp/cli-migrate/no-steps.db', { force: true });
    expect((await cli(['migrate', '--database-url', 'file:.tmp/cli-migrate/no-steps.db'])).code).toBe(0);
    const prisma = await connect({ ...databases[0]!, url: 'file:.tmp/cli-migrate/no-steps.db' });
    try {
      await prisma.$executeRawUnsafe('CREATE TABLE idempotency AS SELECT * FROM idempotency_records');
      await prisma.$executeRawUnsafe('DROP TABLE idempotency_steps');
    } finally {
      await prisma.$disconnect();
    }
    const outcome = await cli([
      'sweep',
      '--database-url',
      'file:.tmp/cli-migrate/no-steps.db',
      '--table',
      'idempotency',
    ]);
    expectOneLineError(outcome, /idempotency_steps.*create the table: idempotent-mutations migrate/);
  });

  it('says, of a table migrate finds there unrecorded, to record its migration rather than run it', async () => {
    await rm('.tmp/cli-migrate/unrecorded.db', { force: true });
    await mkdir('.tmp/cli-migrate', { recursive: true });
    const url = 'file:.tmp/cli-migrate/unrecorded.db';
    expect((await cli(['migrate', '--database-url', url])).code).toBe(0);
    // As if the tables came from prisma db push: there, with no migration recorded.
    const prisma = await connect({ ...databases[0]!, url });
    try {
      await prisma.$executeRawUnsafe('DELETE FROM _prisma_migrations');
    } finally {
      await prisma.$disconnect();
    }
    const outcome = await cli(['migrate', '--database-url', url]);
    expectOneLineError(
      outcome,
      /idempotency_records.*already exists.*20261121000000_idempotency_records.*copy .*prisma\/sqlite\/migrations\/20261121000000_idempotency_records into your prisma\/migrations and run npx prisma migrate resolve --applied 20261121000000_idempotency_records\)/,
    );
    expect(outcome.stderr).not.toContain('create the table');
  });

  it('deletes nothing without the durable steps’ table, and names it with the command that creates it', async () => {
    const isolated = await isolatedDatabase(databases[0]!);
    const prisma = await connect(isolated.db);
    try {
      await prisma.$executeRawUnsafe('DROP TABLE idempotency_steps');
      await insertRecords(prisma, 'sqlite', [
        ...Array.from({ length: 3 }, (_, i) => ({ scope: 'u', key: `old-${i}`, expiresAt: hourAgo() })),
        {
          scope: 'u',
          key: 'stuck',
          status: 'IN_PROGRESS' as const,
          ownerToken: 'a'.repeat(64),
          lockedUntil: hourAgo(),
          expiresAt: inAnHour(),
        },
      ]);
      for (const command of ['sweep', 'stuck']) {
        expectOneLineError(
          await cli([command, '--database-url', isolated.db.url!]),
          /idempotency_steps.*create the table: idempotent-mutations migrate/,
        );
      }
      expect(await countRecords(prisma, 'sqlite', 'u')).toBe(4);
    } finally {
      await prisma.$disconnect();
      await isolated.drop();
    }
  });

  it('refuses --table on migrate, which creates the tables under their own names', async () => {
    await rm('.tmp/cli-migrate/table.db', { force: true });
    const outcome = await cli([
      'migrate',
      '--table',
      'other_records',
      '--database-url',
      'file:.tmp/cli-migrate/table.db',
    ]);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toMatch(/^error: unknown option '--table'/);
    expect(existsSync('.tmp/cli-migrate/table.db')).toBe(false);
    expect((await cli(['migrate', '--help'])).stdout).not.toContain('--table');
  });

  it('refuses --provider on migrate without --print, where the URL decides what is applied', async () => {
    await rm('.tmp/cli-migrate/provider.db', { force: true });
    const outcome = await cli([
      'migrate',
      '--provider',
      'mysql',
      '--database-url',
      'file:.tmp/cli-migrate/provider.db',
    ]);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toMatch(/--provider goes with --print only/);
    expect(existsSync('.tmp/cli-migrate/provider.db')).toBe(false);
  });

  it('creates a missing SQLite file with migrate, applies an app’s own migrations too, and prints the SQL with --print', async () => {
    await rm('.tmp/cli-migrate/new.db', { force: true });
    const outcome = await cli(['migrate', '--database-url', 'file:.tmp/cli-migrate/new.db']);
    expect(outcome).toEqual({
      code: 0,
      stdout:
        'Applied 20261121000000_idempotency_records, 20261130000000_idempotency_steps, 20261201000000_idempotency_steps_expiry.\n',
      stderr: '',
    });
    expect((await cli(['stats', '--json', '--database-url', 'file:.tmp/cli-migrate/new.db'])).code).toBe(0);

    // An app's own migrations come along with --migrations, in name order with the package's.
    await rm('.tmp/cli-migrate/app.db', { force: true });
    const withOwn = await cli([
      'migrate',
      '--json',
      '--database-url',
      'file:.tmp/cli-migrate/app.db',
      '--migrations',
      'examples/prisma/sqlite/migrations',
    ]);
    expect(JSON.parse(withOwn.stdout)).toEqual({
      applied: [
        '20261121000000_idempotency_records',
        '20261121000001_example_tables',
        '20261130000000_idempotency_steps',
        '20261201000000_idempotency_steps_expiry',
      ],
    });

    const asJson = await cli(['migrate', '--print', '--json', '--provider', 'sqlite']);
    const { migrations } = JSON.parse(asJson.stdout) as { migrations: { name: string; sql: string }[] };
    expect(migrations.map(({ name }) => name)).toEqual([
      '20261121000000_idempotency_records',
      '20261130000000_idempotency_steps',
      '20261201000000_idempotency_steps_expiry',
    ]);
    expect(migrations[0]!.sql).toContain('CREATE TABLE "idempotency_records"');

    const printed = await cli(['migrate', '--print', '--provider', 'mysql']);
    expect(printed.code).toBe(0);
    expect(printed.stdout).toMatch(/^-- 20261121000000_idempotency_records\n/);
    expect(printed.stdout).toContain('CREATE TABLE `idempotency_records`');
    expect(printed.stdout).toContain('COLLATE utf8mb4_bin');
    // What a user applies holds only the library's table, not this repository's example tables.
    expect(printed.stdout).not.toMatch(/payments|orders/);
    const fromUrl = await cli(['migrate', '--print', '--database-url', 'postgresql://u:p@h/db']);
    expect(fromUrl.stdout).toContain('CREATE TABLE "idempotency_records"');
  });

  it('reads an app’s migrations before it connects: a folder that is not there leaves no SQLite file behind', async () => {
    await rm('.tmp/cli-migrate/typo.db', { force: true });
    const outcome = await cli([
      'migrate',
      '--database-url',
      'file:.tmp/cli-migrate/typo.db',
      '--migrations',
      '.tmp/cli-migrate/no-such-folder',
    ]);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toMatch(/no-such-folder/);
    expect(existsSync('.tmp/cli-migrate/typo.db')).toBe(false);
  });

  it('orders an app’s migrations with the package’s as prisma migrate does: by character code', async () => {
    const folder = '.tmp/cli-order/migrations';
    await rm('.tmp/cli-order', { recursive: true, force: true });
    for (const name of ['20261121000000_Zones', '20261121000000_accounts']) {
      await mkdir(`${folder}/${name}`, { recursive: true });
      await writeFile(`${folder}/${name}/migration.sql`, `CREATE TABLE t_${name.slice(15)} (id INTEGER);\n`);
    }
    const printed = await cli(['migrate', '--print', '--provider', 'sqlite', '--migrations', folder]);
    expect([...printed.stdout.matchAll(/^-- (\d{14}_\w+)$/gm)].map((match) => match[1])).toEqual([
      '20261121000000_Zones',
      '20261121000000_accounts',
      '20261121000000_idempotency_records',
      '20261130000000_idempotency_steps',
      '20261201000000_idempotency_steps_expiry',
    ]);
  });

  it('creates and opens the one file a sqlite:// URL or a URL with Prisma 6’s parameters names', async () => {
    await rm('.tmp/cli-urls', { recursive: true, force: true });
    const migrated = await cli(['migrate', '--database-url', 'sqlite://.tmp/cli-urls/app.db']);
    expect(migrated).toEqual({
      code: 0,
      stdout:
        'Applied 20261121000000_idempotency_records, 20261130000000_idempotency_steps, 20261201000000_idempotency_steps_expiry.\n',
      stderr: '',
    });
    const stats = await cli([
      'stats',
      '--json',
      '--database-url',
      'file:.tmp/cli-urls/app.db?connection_limit=1&socket_timeout=10',
    ]);
    expect(stats.stderr).toBe('');
    expect(JSON.parse(stats.stdout)).toMatchObject({ total: 0 });
    expect(readdirSync('.tmp/cli-urls')).toEqual(['app.db']);
  });

  it.each([
    [
      'a SQLite parameter it would not apply',
      'file:.tmp/cli-urls/app.db?mode=ro',
      /: mode\. Only the file's path/,
    ],
    [
      'an in-memory SQLite database',
      'file::memory:',
      /in-memory SQLite database \(:memory:\) ends with the command/,
    ],
  ])('refuses %s', async (_, url, message) => {
    expectOneLineError(await cli(['migrate', '--database-url', url]), message);
  });

  it('rejects a batch size that is not a positive integer, or is over 10,000', async () => {
    const outcome = await cli(['sweep', '--batch-size', '0', '--database-url', 'file:.tmp/x.db']);
    expect(outcome.code).not.toBe(0);
    expect(outcome.stderr).toContain("argument '0' is invalid");
    const over = await cli(['sweep', '--batch-size', '10001', '--database-url', 'file:.tmp/x.db']);
    expect(over.code).not.toBe(0);
    expect(over.stderr).toContain("argument '10001' is invalid. expected an integer from 1 to 10000");
  });

  it.each([[[]], [['migrate']], [['sweep']], [['stats']], [['stuck']]])(
    'prints help for %j --help',
    async (command) => {
      const { code, stdout } = await cli([...command, '--help']);
      expect(code).toBe(0);
      expect(stdout).toMatch(/^Usage: idempotent-mutations/);
      if (command.length) expect(stdout).toContain('--database-url <url>');
    },
  );
});

describeEachDatabase('the idempotent-mutations CLI on a records table elsewhere', (shared) => {
  let isolated: IsolatedDatabase;
  let prisma: Awaited<ReturnType<typeof connect>>;
  const { provider } = shared;
  beforeAll(async () => {
    isolated = await isolatedDatabase(shared);
    prisma = await connect(isolated.db);
    await copyRecordsTable(prisma, provider, 'other_records');
  });
  afterAll(async () => {
    await prisma?.$disconnect();
    await isolated?.drop();
  });

  it('counts and sweeps the table --table names', async () => {
    await insertRecords(
      prisma,
      provider,
      [
        { scope: 'u', key: 'expired', expiresAt: hourAgo() },
        { scope: 'u', key: 'live', expiresAt: inAnHour() },
      ],
      'other_records',
    );
    await insertRecords(prisma, provider, [{ scope: 'u', key: 'elsewhere', expiresAt: hourAgo() }]);
    const url = isolated.db.url!;
    const stats = await cli(['stats', '--json', '--table', 'other_records', '--database-url', url]);
    expect(JSON.parse(stats.stdout)).toMatchObject({ total: 2, expired: 1 });
    const sweep = await cli(['sweep', '--json', '--table', 'other_records', '--database-url', url]);
    expect(JSON.parse(sweep.stdout)).toMatchObject({ deleted: 1 });
    expect(await countRecords(prisma, provider, 'u', 'other_records')).toBe(1);
    expect(await countRecords(prisma, provider, 'u')).toBe(1);
  });

  it('names the missing table it was given', async () => {
    const outcome = await cli(['stats', '--table', 'no_such_records', '--database-url', isolated.db.url!]);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toMatch(/no_such_records/);
  });

  it.runIf(provider === 'postgresql')("looks in the URL's ?schema= on PostgreSQL", async () => {
    await insertRecords(prisma, provider, [{ scope: 's', key: 'expired', expiresAt: hourAgo() }]);
    // The server's URL, without the isolated database's search path: only ?schema= leads there.
    const url = `${shared.url}${shared.url!.includes('?') ? '&' : '?'}schema=${isolated.name}`;
    const stats = await cli(['stats', '--json', '--database-url', url]);
    expect(stats.code).toBe(0);
    const [all] = await prisma.$queryRawUnsafe<{ n: unknown }[]>(
      'SELECT COUNT(*) AS n FROM idempotency_records',
    );
    expect(JSON.parse(stats.stdout)).toMatchObject({ total: Number(all!.n) });
    const swept = await cli(['sweep', '--json', '--database-url', url]);
    expect(JSON.parse(swept.stdout)).toMatchObject({ deleted: expect.any(Number) });
    expect(await countRecords(prisma, provider, 's')).toBe(0);
  });
});
