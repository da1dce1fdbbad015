import type { PrismaQueryable, RecordStats } from '../../src/prisma/index.js';
import type { RecordRow } from './records.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/**
 * One record in each state the maintenance commands tell apart, relative to `now`, created in
 * key order from `createdFrom` on (a minute apart), with `prefix` on every key.
 */
export function recordsInEveryState(now: number, createdFrom: number, prefix = ''): RecordRow[] {
  const rows: Omit<RecordRow, 'scope' | 'createdAt'>[] = [
    // Completed with 24 h left: neither expired nor swept.
    { key: 'live', expiresAt: new Date(now + DAY) },
    { key: 'expired', expiresAt: new Date(now - HOUR) },
    // Past its expiry under a lease that still runs: a resolver is at work.
    {
      key: 'leased',
      status: 'IN_PROGRESS',
      ownerToken: 'a'.repeat(64),
      lockedUntil: new Date(now + HOUR),
      expiresAt: new Date(now - HOUR),
    },
    {
      key: 'stuck',
      status: 'IN_PROGRESS',
      ownerToken: 'b'.repeat(64),
      lockedUntil: new Date(now - HOUR),
      expiresAt: new Date(now + DAY),
    },
    // Its lease ran out and it expired: stuck, and swept.
    {
      key: 'abandoned',
      status: 'IN_PROGRESS',
      ownerToken: 'c'.repeat(64),
      lockedUntil: new Date(now - HOUR),
      expiresAt: new Date(now - HOUR),
    },
    { key: 'unleased', status: 'IN_PROGRESS', lockedUntil: null, expiresAt: new Date(now + DAY) },
  ];
  return rows.map((row, i) => ({
    ...row,
    scope: 'u',
    key: `${prefix}${row.key}`,
    createdAt: new Date(createdFrom + i * 60_000),
  }));
}

/** What `recordStats` reports for `recordsInEveryState` (times aside), per set of records. */
export const everyStateCounts: Omit<RecordStats, 'oldestCreatedAt' | 'newestCreatedAt'> = {
  total: 6,
  completed: 2,
  inProgress: 4,
  expired: 2,
  stuck: 3,
};

/** The keys of `recordsInEveryState` that `stuckRecords` lists, oldest first. */
export const stuckKeys = ['stuck', 'abandoned', 'unleased'];

/** The keys of `recordsInEveryState` that a sweep leaves. */
export const unsweptKeys = ['live', 'leased', 'stuck', 'unleased'];

/**
 * The keys in `idempotency_records`, sorted. Raw SQL, not the model: a PostgreSQL test database
 * of its own is a schema on the search path, which Prisma's model queries (qualified by the
 * schema the client was generated for) do not see.
 */
export async function storedKeys(prisma: PrismaQueryable): Promise<string[]> {
  const rows = await prisma.$queryRawUnsafe<{ k: unknown }[]>(
    'SELECT idempotency_key AS k FROM idempotency_records',
  );
  return rows.map((row) => String(row.k)).sort();
}
