import { afterAll, afterEach, beforeAll, beforeEach, expect, it, vi } from 'vitest';
import { runIdempotent } from '../../src/index.js';
import {
  prismaStore,
  recordStats,
  startSweeper,
  stuckRecords,
  sweepExpired,
} from '../../src/prisma/index.js';
import { databaseNow } from '../helpers/database-time.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';
import {
  everyStateCounts,
  recordsInEveryState,
  storedKeys,
  stuckKeys,
  unsweptKeys,
} from '../helpers/record-states.js';
import { countRecords, insertRecords, insertSteps } from '../helpers/records.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const at = (iso: string) => new Date(iso);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const hourAgo = () => new Date(Date.now() - 3_600_000);

// A sweep deletes every expired record in the table, so these tests run on a database of their
// own (a schema, a database or a file) rather than on the one the other suites share.
describeEachDatabase('sweepExpired', (shared) => {
  let isolated: IsolatedDatabase;
  let prisma: Awaited<ReturnType<typeof connect>>;
  const db = { ...shared };

  beforeAll(async () => {
    isolated = await isolatedDatabase(shared);
    prisma = await connect(isolated.db);
  });
  afterAll(async () => {
    await prisma?.$disconnect();
    await isolated?.drop();
  });
  beforeEach(async () => {
    await prisma.$executeRawUnsafe('DELETE FROM idempotency_records');
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('deletes 10,000 expired records in batches of 1,000 and leaves the live ones', async () => {
    const scope = uniqueScope('sweep');
    const now = await databaseNow(prisma, db.provider);
    const expired = Array.from({ length: 10_000 }, (_, i) => ({
      scope,
      key: `expired-${i}`,
      expiresAt: new Date(at('2000-01-01T00:00:00Z').getTime() + i * 1_000),
    }));
    const live = [
      ...Array.from({ length: 20 }, (_, i) => ({
        scope,
        key: `live-${i}`,
        expiresAt: new Date(now + DAY),
      })),
      // Past its expiry but still under a running lease: a resolver is at work, never sweep it.
      ...Array.from({ length: 5 }, (_, i) => ({
        scope,
        key: `leased-${i}`,
        status: 'IN_PROGRESS' as const,
        ownerToken: 'a'.repeat(64),
        lockedUntil: new Date(now + 5 * 60_000),
        expiresAt: at('2000-01-01T00:00:00Z'),
      })),
    ];
    await insertRecords(prisma, db.provider, [...expired, ...live]);
    const batches: number[] = [];
    const deleted = await sweepExpired(prisma, {
      onBatch: ({ deleted }) => batches.push(deleted - batches.reduce((a, b) => a + b, 0)),
    });
    expect(deleted).toBe(10_000);
    // Ten full batches of records, one that found none left, then the steps' (none).
    expect(batches).toEqual([...Array(10).fill(1_000), 0, 0]);
    expect(await countRecords(prisma, db.provider, scope)).toBe(25);
    expect((await storedKeys(prisma)).filter((key) => key.startsWith('expired-'))).toEqual([]);
  });

  it('deletes exactly the keys it picked, across scopes and in every batch size, and no key differing only in case', async () => {
    const [one, two] = [uniqueScope('sweep'), uniqueScope('sweep')];
    const now = await databaseNow(prisma, db.provider);
    const expired = (scope: string, key: string) => ({ scope, key, expiresAt: at('2000-01-01T00:00:00Z') });
    const live = (scope: string, key: string) => ({ scope, key, expiresAt: new Date(now + DAY) });
    await insertRecords(prisma, db.provider, [
      expired(one, 'd'),
      expired(one, 'e'),
      expired(two, 'd'),
      expired(two, 'x'),
      live(one, 'D'),
      live(two, 'E'),
      live(one, 'dd'),
      live(two, 'e'),
    ]);
    // Batches of 3 keys, then of 1 (MySQL/MariaDB write the two differently).
    expect(await sweepExpired(prisma, { batchSize: 3 })).toBe(4);
    expect((await storedKeys(prisma)).sort()).toEqual(['D', 'E', 'dd', 'e']);
    expect(await countRecords(prisma, db.provider, one)).toBe(2);
  });

  // SQLite has one writer: its sweeps never run at once.
  it.skipIf(shared.provider === 'sqlite')(
    'runs on several servers at once: concurrent sweeps delete every expired record between them, once',
    async () => {
      const scope = uniqueScope('sweep');
      const now = await databaseNow(prisma, db.provider);
      await insertRecords(prisma, db.provider, [
        ...Array.from({ length: 3_000 }, (_, i) => ({
          scope,
          key: `expired-${i}`,
          expiresAt: new Date(at('2000-01-01T00:00:00Z').getTime() + i * 1_000),
        })),
        { scope, key: 'live', expiresAt: new Date(now + DAY) },
      ]);
      const others = await Promise.all([connect(isolated.db), connect(isolated.db)]);
      try {
        const counts = await Promise.all(
          [prisma, ...others].map((client) => sweepExpired(client, { batchSize: 250 })),
        );
        expect(counts.reduce((a, b) => a + b, 0)).toBe(3_000);
        expect(await storedKeys(prisma)).toEqual(['live']);
      } finally {
        await Promise.all(others.map((client) => client.$disconnect()));
      }
    },
  );

  it('deletes the durable steps of the records it sweeps with them, in batches, and keeps the others', async () => {
    const scope = uniqueScope('sweep');
    const now = await databaseNow(prisma, db.provider);
    await insertRecords(prisma, db.provider, [
      { scope, key: 'expired', expiresAt: hourAgo() },
      { scope, key: 'live', expiresAt: new Date(now + DAY) },
    ]);
    // A step expires with its record or before it: ttlMs after it was stored.
    await insertSteps(prisma, db.provider, scope, 'expired', ['reserve', 'charge', 'ship'], hourAgo());
    await insertSteps(prisma, db.provider, scope, 'live', ['reserve', 'charge', 'ship']);
    expect(await sweepExpired(prisma, { batchSize: 2 })).toBe(1);
    const left = await prisma.$queryRawUnsafe<{ idempotency_key: string }[]>(
      `SELECT idempotency_key FROM idempotency_steps WHERE scope = ${db.provider === 'postgresql' ? '$1' : '?'}`,
      scope,
    );
    expect(left.map((row) => row.idempotency_key)).toEqual(['live', 'live', 'live']);
  });

  it('stops after maxBatches, and at once when its signal is aborted', async () => {
    const scope = uniqueScope('sweep');
    const rows = Array.from({ length: 500 }, (_, i) => ({
      scope,
      key: `k-${i}`,
      expiresAt: at('2001-01-01T00:00:00Z'),
    }));
    await insertRecords(prisma, db.provider, rows);
    expect(await sweepExpired(prisma, { batchSize: 100, maxBatches: 3 })).toBe(300);
    expect(await sweepExpired(prisma, { batchSize: 100, signal: AbortSignal.abort() })).toBe(0);
    expect(await countRecords(prisma, db.provider, scope)).toBe(200);
    const stopping = new AbortController();
    const deleted = await sweepExpired(prisma, {
      batchSize: 100,
      signal: stopping.signal,
      onBatch: () => stopping.abort(),
    });
    expect(deleted).toBe(100);
    expect(await countRecords(prisma, db.provider, scope)).toBe(100);
  });

  it('counts the steps’ batches within maxBatches, after the records’', async () => {
    const scope = uniqueScope('sweep');
    await prisma.$executeRawUnsafe('DELETE FROM idempotency_steps');
    await insertRecords(prisma, db.provider, [{ scope, key: 'expired', expiresAt: hourAgo() }]);
    // Steps whose record is gone, expired: the sweep's to delete, a batch of one at a time.
    await insertSteps(prisma, db.provider, scope, 'gone', ['reserve', 'charge'], hourAgo());
    const stepsLeft = async () =>
      Number(
        (await prisma.$queryRawUnsafe<{ n: unknown }[]>('SELECT COUNT(*) AS n FROM idempotency_steps'))[0]!.n,
      );
    // One batch: the record's, and no step's.
    expect(await sweepExpired(prisma, { batchSize: 1, maxBatches: 1 })).toBe(1);
    expect(await stepsLeft()).toBe(2);
    // The records' batch finds none now and does not count: even a budget of one reaches the steps.
    expect(await sweepExpired(prisma, { batchSize: 1, maxBatches: 1 })).toBe(0);
    expect(await stepsLeft()).toBe(1);
    expect(await sweepExpired(prisma, { batchSize: 1, maxBatches: 1 })).toBe(0);
    expect(await stepsLeft()).toBe(0);
  });

  it('lets timers run between batches, so an in-process sweep does not hold up the server', async () => {
    const rows = Array.from({ length: 2_000 }, (_, i) => ({
      scope: 'u',
      key: `k-${i}`,
      expiresAt: hourAgo(),
    }));
    await insertRecords(prisma, db.provider, rows);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    try {
      expect(await sweepExpired(prisma, { batchSize: 10 })).toBe(2_000);
    } finally {
      clearInterval(timer);
    }
    expect(ticks).toBeGreaterThan(0);
  });

  it('sweeps in the background with startSweeper until stopped', async () => {
    const scope = uniqueScope('sweeper');
    const now = Date.now();
    await insertRecords(prisma, db.provider, [
      ...Array.from({ length: 30 }, (_, i) => ({
        scope,
        key: `old-${i}`,
        expiresAt: new Date(now - 60_000),
      })),
      { scope, key: 'fresh', expiresAt: new Date(now + 3_600_000) },
    ]);
    const sweeps: number[] = [];
    const sweeper = startSweeper(prisma, { intervalMs: 50, onSweep: (n) => sweeps.push(n) });
    for (let waited = 0; waited < 10_000; waited += 50) {
      if ((await countRecords(prisma, db.provider, scope)) === 1) break;
      await sleep(50);
    }
    await sweeper.stop();
    expect(await countRecords(prisma, db.provider, scope)).toBe(1);
    expect(sweeps.reduce((a, b) => a + b, 0)).toBe(30);
    const after = sweeps.length;
    await sleep(150);
    expect(sweeps.length).toBe(after);
  });

  it('startSweeper counts what a sweep deleted before it failed, then reports the failure', async () => {
    const scope = uniqueScope('sweeper-fails');
    await insertRecords(
      prisma,
      db.provider,
      Array.from({ length: 3 }, (_, i) => ({ scope, key: `old-${i}`, expiresAt: hourAgo() })),
    );
    // The records' batches go through; the steps' DELETE fails (a lock timeout, a connection reset).
    const failingSteps = <C extends object>(client: C): C =>
      new Proxy(client, {
        get(target, name) {
          const value = Reflect.get(target, name) as unknown;
          if (typeof value !== 'function') return value;
          if (name === '$transaction') {
            return (run: (tx: object) => unknown, ...rest: unknown[]) =>
              value.call(target, (tx: object) => run(failingSteps(tx)), ...rest);
          }
          if (name !== '$executeRawUnsafe' && name !== '$queryRawUnsafe') return value.bind(target);
          return (text: string, ...values: unknown[]) =>
            /DELETE\s+FROM\s+\S*idempotency_steps/i.test(text)
              ? Promise.reject(new Error('connection reset'))
              : value.call(target, text, ...values);
        },
      });
    const heard: string[] = [];
    let failed!: () => void;
    const firstFailure = new Promise<void>((resolve) => (failed = resolve));
    const sweeper = startSweeper(failingSteps(prisma), {
      intervalMs: 1,
      onSweep: (deleted) => heard.push(`swept ${deleted}`),
      onError: (error) => {
        heard.push(`failed: ${(error as Error).message}`);
        failed();
      },
    });
    await firstFailure;
    await sweeper.stop();
    expect(heard.slice(0, 2)).toEqual(['swept 3', 'failed: connection reset']);
    expect(await countRecords(prisma, db.provider, scope)).toBe(0);
  });

  it('counts and sweeps only what is committed while another request’s transaction is open', async () => {
    // Through Prisma's SQLite adapter (one connection) these statements used to run inside that
    // transaction: a running claim was reported stuck, and a sweep's deletions rolled back with it.
    const scope = uniqueScope();
    await insertRecords(prisma, db.provider, [{ scope, key: 'old', expiresAt: hourAgo() }]);
    let inside!: () => void;
    const opened = new Promise<void>((resolve) => (inside = resolve));
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const running = runIdempotent(
      { store: prismaStore(prisma), scope, key: 'k', operation: 'orders.create', input: {} },
      async () => {
        inside();
        await finished;
        throw new Error('rolls back');
      },
    ).catch(() => undefined);
    await opened;
    const during = Promise.all([recordStats(prisma), stuckRecords(prisma), sweepExpired(prisma)]);
    await sleep(100);
    finish();
    const [stats, stuck, deleted] = await during;
    await running;
    expect(stats.stuck).toBe(0);
    expect(stuck).toEqual([]);
    expect(deleted).toBe(1);
    expect((await recordStats(prisma)).total).toBe(0);
  });

  it('reports zero counts and no dates for an empty table', async () => {
    expect(await recordStats(prisma)).toEqual({
      total: 0,
      inProgress: 0,
      completed: 0,
      oldestCreatedAt: null,
      newestCreatedAt: null,
      expired: 0,
      stuck: 0,
    });
    expect(await stuckRecords(prisma)).toEqual([]);
  });

  it('reports counts, the oldest record and in-progress records past their lease', async () => {
    const scope = uniqueScope('stats');
    const now = await databaseNow(prisma, db.provider);
    await insertRecords(prisma, db.provider, [
      { scope, key: 'done', createdAt: at('1990-01-01T00:00:00Z'), expiresAt: at('2100-01-01T00:00:00Z') },
      {
        scope,
        key: 'stuck',
        status: 'IN_PROGRESS',
        ownerToken: 'b'.repeat(64),
        createdAt: at('1990-01-02T00:00:00Z'),
        lockedUntil: at('2002-05-31T00:00:00Z'),
        expiresAt: at('2100-01-01T00:00:00Z'),
      },
      {
        scope,
        key: 'running',
        status: 'IN_PROGRESS',
        ownerToken: 'c'.repeat(64),
        createdAt: at('1990-01-03T00:00:00Z'),
        lockedUntil: new Date(now + 60_000),
        expiresAt: at('2100-01-01T00:00:00Z'),
      },
      { scope, key: 'expired', createdAt: at('1990-01-04T00:00:00Z'), expiresAt: at('2002-01-01T00:00:00Z') },
    ]);
    expect(await recordStats(prisma)).toEqual({
      total: 4,
      inProgress: 2,
      completed: 2,
      oldestCreatedAt: at('1990-01-01T00:00:00Z'),
      newestCreatedAt: at('1990-01-04T00:00:00Z'),
      expired: 1,
      stuck: 1,
    });
    expect(await stuckRecords(prisma)).toEqual([
      {
        scope,
        key: 'stuck',
        operation: 'test.op',
        createdAt: at('1990-01-02T00:00:00Z'),
        lockedUntil: at('2002-05-31T00:00:00Z'),
        expiresAt: at('2100-01-01T00:00:00Z'),
        steps: [],
      },
    ]);
  });

  it('lists more than a thousand stuck records, each with its steps', async () => {
    const scope = uniqueScope('stuck');
    const stuck = Array.from({ length: 1_200 }, (_, i) => ({
      scope,
      key: `stuck-${i}`,
      status: 'IN_PROGRESS' as const,
      ownerToken: 'b'.repeat(64),
      createdAt: new Date(at('1990-01-01T00:00:00Z').getTime() + i * 1_000),
      lockedUntil: at('2002-05-31T00:00:00Z'),
      expiresAt: at('2100-01-01T00:00:00Z'),
    }));
    await insertRecords(prisma, db.provider, stuck);
    await insertSteps(prisma, db.provider, scope, 'stuck-0', ['reserve']);
    await insertSteps(prisma, db.provider, scope, 'stuck-1199', ['reserve', 'charge']);
    const listed = await stuckRecords(prisma, { limit: 1_500 });
    expect(listed.map((r) => r.key)).toEqual(stuck.map((r) => r.key));
    expect(listed.filter((r) => r.steps.length > 0).map((r) => [r.key, r.steps])).toEqual([
      ['stuck-0', ['reserve']],
      ['stuck-1199', ['reserve', 'charge']],
    ]);
  });

  it.each([
    ['a day behind', -DAY],
    ['a day ahead', DAY],
  ])('counts, lists and sweeps by the database’s clock with this process’s clock %s', async (_, shift) => {
    const now = await databaseNow(prisma, db.provider);
    const rows = recordsInEveryState(now, now - 30 * DAY);
    await insertRecords(prisma, db.provider, rows);
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(now + shift);

    expect(await recordStats(prisma)).toEqual({
      ...everyStateCounts,
      oldestCreatedAt: rows[0]!.createdAt,
      newestCreatedAt: rows.at(-1)!.createdAt,
    });
    expect((await stuckRecords(prisma)).map((r) => r.key)).toEqual(stuckKeys);
    expect(await sweepExpired(prisma)).toBe(2);
    expect(await storedKeys(prisma)).toEqual([...unsweptKeys].sort());
  });

  it.each([
    ['a day behind', -DAY],
    ['a day ahead', DAY],
  ])('startSweeper sweeps by the database’s clock with this process’s clock %s', async (_, shift) => {
    const now = await databaseNow(prisma, db.provider);
    await insertRecords(prisma, db.provider, recordsInEveryState(now, now - 30 * DAY));
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(now + shift);

    let swept!: (deleted: number) => void;
    const firstSweep = new Promise<number>((resolve) => (swept = resolve));
    const sweeper = startSweeper(prisma, { intervalMs: 1, onSweep: (deleted) => swept(deleted) });
    const deleted = await firstSweep;
    await sweeper.stop();
    expect(deleted).toBe(2);
    expect(await storedKeys(prisma)).toEqual([...unsweptKeys].sort());
  });
});

it.each([
  ['an interval Node’s timer cannot hold (it would fire at once)', { intervalMs: 2 ** 31 }],
  ['an infinite interval', { intervalMs: Number.POSITIVE_INFINITY }],
  ['a batch size of 0', { batchSize: 0 }],
  ['a fractional batch size', { batchSize: 1.5 }],
  ['a batch size over 10,000, whose keys MariaDB could not bind', { batchSize: 10_001 }],
  ['maxBatches 0', { maxBatches: 0 }],
])('startSweeper refuses %s at once, before any sweep', (_, options) => {
  // No client is reached: the options are refused before anything runs.
  expect(() => startSweeper({} as never, options)).toThrow(RangeError);
});
