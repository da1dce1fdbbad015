import type { PrismaQueryable, Provider } from '../../src/prisma/client.js';
import { databaseClock } from '../../src/prisma/database-clock.js';
import { toDate } from '../../src/prisma/row.js';

/**
 * The database's clock, in epoch milliseconds. Tests that need a record to be expired (or not)
 * write its times relative to this, never to the process's clock.
 */
export async function databaseNow(prisma: PrismaQueryable, provider: Provider): Promise<number> {
  const [row] = await prisma.$queryRawUnsafe<{ now: unknown }[]>(
    `SELECT ${databaseClock(provider).now} AS now`,
  );
  const now = toDate(row?.now)?.getTime();
  if (now === undefined || Number.isNaN(now))
    throw new Error(`cannot read the database's clock: ${row?.now}`);
  return now;
}
