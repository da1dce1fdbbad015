import { PrismaBetterSqlite3 } from '@prisma/adapter-better-sqlite3';
import { Decimal } from '@prisma/client/runtime/client';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrismaClient } from '../../generated/sqlite/client.js';
import { migrate } from '../../scripts/migrate.js';
import { runIdempotent } from '../../src/index.js';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import { retryBusyCommits } from '../../src/prisma/busy-commits.js';
import { SQLITE_BUSY_TIMEOUT_MS } from '../../src/prisma/database-errors.js';
import { prismaStore } from '../../src/prisma/store.js';

const file = `.tmp/sqlite-busy-commit-${process.pid}.db`;

// Outside WAL mode a COMMIT waits for other connections' readers; past the busy timeout SQLite
// answers SQLITE_BUSY and keeps the transaction open, and Prisma sends no ROLLBACK: the connection
// stayed in it, the store ran the call again inside it, and all of it was lost with the process.
describe('SQLite: a COMMIT that fails, or that another process’s reader holds up', () => {
  let other: Database.Database;
  const clients: PrismaClient[] = [];
  beforeAll(async () => {
    await migrate(`file:${file}`);
    other = new Database(file);
    // A foreign key checked at COMMIT.
    other.exec(
      'CREATE TABLE parents (id INTEGER PRIMARY KEY); ' +
        'CREATE TABLE children (id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES parents(id) DEFERRABLE INITIALLY DEFERRED)',
    );
  });
  afterAll(async () => {
    other?.close();
    for (const client of clients) await client.$disconnect();
  });

  /** Another connection that reads the file for `ms`: it holds SQLite's SHARED lock meanwhile. */
  function readFor(ms: number) {
    other.exec('BEGIN');
    other.prepare('SELECT count(*) FROM idempotency_records').get();
    setTimeout(() => other.exec('COMMIT'), ms);
  }

  /** What a new connection sees committed for `scope`. */
  function committed(scope: string) {
    const fresh = new Database(file, { readonly: true });
    try {
      return {
        payments: fresh.prepare('SELECT count(*) AS n FROM payments WHERE user_id = ?').get(scope),
        records: fresh.prepare('SELECT status FROM idempotency_records WHERE scope = ?').all(scope),
      };
    } finally {
      fresh.close();
    }
  }

  async function payments(prisma: PrismaClient, scope: string, readerMs: number) {
    const store = prismaStore(prisma, { transaction: { maxWait: 3_000, timeout: 10_000 } });
    let runs = 0;
    const run = () =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, async (tx) => {
        runs++;
        await tx.payment.create({ data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' } });
        if (runs === 1) readFor(readerMs);
        return 'paid';
      });
    return { run, runs: () => runs };
  }

  it('commits once the reader is done, with adapterForUrl’s adapter', async () => {
    const prisma = new PrismaClient({ adapter: (await adapterForUrl(`file:${file}`)) as never });
    clients.push(prisma);
    const call = await payments(prisma, 'waits', 300);
    expect(await call.run()).toMatchObject({ value: 'paid', replayed: false });
    expect(call.runs()).toBe(1);
    expect(committed('waits')).toEqual({ payments: { n: 1 }, records: [{ status: 'COMPLETED' }] });
    expect(await call.run()).toMatchObject({ value: 'paid', replayed: true });
    // The connection is in no transaction of ours: another one starts and commits.
    await prisma.$transaction((tx) => tx.$executeRawUnsafe('SELECT 1'));
  }, 20_000);

  it('rolls back a COMMIT that failed otherwise (a deferred foreign key): the next call commits', async () => {
    const prisma = new PrismaClient({ adapter: (await adapterForUrl(`file:${file}`)) as never });
    clients.push(prisma);
    const store = prismaStore(prisma);
    const orphan = runIdempotent(
      { store, scope: 'fk', key: 'k1', operation: 'op', input: {} },
      async (tx) => {
        await tx.$executeRawUnsafe('INSERT INTO children (parent_id) VALUES (999)');
        return 'ok';
      },
    );
    await expect(orphan).rejects.toThrow(/foreign ?key/i);
    const next = await runIdempotent(
      { store, scope: 'fk', key: 'k2', operation: 'op', input: {} },
      async (tx) => {
        await tx.payment.create({ data: { userId: 'fk', amount: new Decimal('1'), currency: 'EUR' } });
        return 'paid';
      },
    );
    expect(next).toMatchObject({ value: 'paid', replayed: false });
    expect(committed('fk')).toEqual({ payments: { n: 1 }, records: [{ status: 'COMPLETED' }] });
  }, 20_000);

  it('rolls the transaction back when the reader outlasts the wait, and the call runs again once', async () => {
    const adapter = retryBusyCommits(
      new PrismaBetterSqlite3({ url: `file:${file}`, timeout: SQLITE_BUSY_TIMEOUT_MS }),
      {
        waitMs: 100,
      },
    );
    const prisma = new PrismaClient({ adapter });
    clients.push(prisma);
    const call = await payments(prisma, 'rolls-back', 800);
    expect(await call.run()).toMatchObject({ value: 'paid', replayed: false });
    expect(call.runs()).toBeGreaterThan(1);
    expect(committed('rolls-back')).toEqual({ payments: { n: 1 }, records: [{ status: 'COMPLETED' }] });
    const runs = call.runs();
    expect(await call.run()).toMatchObject({ value: 'paid', replayed: true });
    expect(call.runs()).toBe(runs);
  }, 20_000);
});
