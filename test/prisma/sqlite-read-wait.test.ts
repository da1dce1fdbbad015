import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrismaClient } from '../../generated/sqlite/client.js';
import { migrate } from '../../scripts/migrate.js';
import { IdempotencyStoreUnavailableError } from '../../src/index.js';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import { prismaStore } from '../../src/prisma/store.js';

const file = `.tmp/sqlite-read-wait-${process.pid}.db`;

// A read outside a transaction (a retry's first read, a waiting duplicate's, a call's steps) waits
// for another process's lock as long as a transaction does, `transaction.maxWait`, not 5 s.
describe('SQLite reads under another process’s lock', () => {
  let prisma: PrismaClient;
  let other: Database.Database;
  beforeAll(async () => {
    await migrate(`file:${file}`);
    prisma = new PrismaClient({ adapter: (await adapterForUrl(`file:${file}`)) as never });
    other = new Database(file);
  });
  afterAll(async () => {
    other?.close();
    await prisma?.$disconnect();
  });

  it('give up after transaction.maxWait with IDEMPOTENCY_STORE_UNAVAILABLE', async () => {
    const store = prismaStore(prisma, { transaction: { maxWait: 300 } });
    other.exec('BEGIN EXCLUSIVE'); // another process writing: readers get SQLITE_BUSY
    try {
      for (const read of [() => store.find('u', 'k'), () => store.steps!.list('u', 'k')]) {
        const started = performance.now();
        await expect(read()).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
        // The default wait is 5 s: well under it, whatever the machine's load.
        expect(performance.now() - started).toBeLessThan(2_500);
      }
    } finally {
      other.exec('ROLLBACK');
    }
    await expect(store.find('u', 'k')).resolves.toBeNull();
  }, 20_000);
});
