import { afterAll, beforeAll } from 'vitest';
import { type PrismaStore, prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase } from '../helpers/databases.js';
import { runStoreConformance } from '../helpers/store-conformance.js';

/** SQL that moves a timestamp column `?` milliseconds into the past, per database. */
const earlier = {
  sqlite: (column: string) =>
    `strftime('%Y-%m-%dT%H:%M:%f+00:00', ${column}, printf('%+.3f seconds', -? / 1000.0))`,
  postgresql: (column: string) => `${column} - CAST(? AS bigint) * interval '1 millisecond'`,
  mysql: (column: string) => `${column} - INTERVAL (? * 1000) MICROSECOND`,
};

describeEachDatabase('prismaStore', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma?.$disconnect());

  /**
   * Time passing for one scope's records, as the database sees it: every stored time moves back
   * by `ms`, which is what the database's clock moving forward by `ms` means to them.
   */
  async function travel(scope: string, ms: number): Promise<void> {
    const shift = earlier[db.provider];
    const numbered = (text: string) => {
      let n = 0;
      return db.provider === 'postgresql' ? text.replace(/\?/g, () => `$${++n}`) : text;
    };
    const moved = (columns: string[]) => columns.map((column) => `${column} = ${shift(column)}`).join(', ');
    const records = ['created_at', 'completed_at', 'expires_at', 'locked_until'];
    await prisma.$executeRawUnsafe(
      numbered(`UPDATE idempotency_records SET ${moved(records)} WHERE scope = ?`),
      ...records.map(() => ms),
      scope,
    );
    // The steps' times move with their records'.
    await prisma.$executeRawUnsafe(
      numbered(`UPDATE idempotency_steps SET ${moved(['created_at', 'expires_at'])} WHERE scope = ?`),
      ms,
      ms,
      scope,
    );
  }

  // A store a call: each plays another server on the same database.
  runStoreConformance(db.name, () => ({ store: () => prismaStore(prisma) as PrismaStore<unknown>, travel }));
});
