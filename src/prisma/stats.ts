import { type PrismaQueryable, type Provider, providerOf } from './client.js';
import { standalone } from './database-errors.js';
import { forProvider, STUCK, SWEEPABLE } from './dialect.js';
import { toDate } from './row.js';

const TABLE = 'idempotency_records';

/** Counts over `idempotency_records`, as the CLI's `stats` shows them. */
export interface RecordStats {
  total: number;
  inProgress: number;
  completed: number;
  /** When the oldest record still stored was created; `null` when there are none. */
  oldestCreatedAt: Date | null;
  newestCreatedAt: Date | null;
  /** Expired records the sweeper has not deleted yet. */
  expired: number;
  /** `IN_PROGRESS` records whose lease ran out (see `stuckRecords`). */
  stuck: number;
}

/** Options of `recordStats` and `stuckRecords`. */
export interface StatsOptions {
  /** @default now */
  now?: Date;
  /** The database, when it cannot be read off the client. @default the client's generated provider */
  provider?: Provider;
}

/** Counts records by status, expired and stuck, with the oldest and newest creation time (one scan). */
export async function recordStats(prisma: PrismaQueryable, options: StatsOptions = {}): Promise<RecordStats> {
  const { now = new Date() } = options;
  const count = (condition: string) => `SUM(CASE WHEN ${condition} THEN 1 ELSE 0 END)`;
  const provider = options.provider ?? providerOf(prisma);
  const sql = forProvider(
    provider,
    `SELECT COUNT(*) AS total, ${count("status = 'COMPLETED'")} AS completed, ${count(SWEEPABLE)} AS expired, ` +
      `${count(STUCK)} AS stuck, MIN(created_at) AS oldest, MAX(created_at) AS newest FROM ${TABLE}`,
  );
  const [row = {}] = await standalone(prisma, provider, (client) =>
    client.$queryRawUnsafe<Record<string, unknown>[]>(sql, now, now, now),
  );
  // COUNT and SUM come back as bigint, Decimal, string or number, depending on the driver.
  const number = (value: unknown) => Number(value ?? 0);
  const total = number(row.total);
  const completed = number(row.completed);
  return {
    total,
    inProgress: total - completed,
    completed,
    oldestCreatedAt: toDate(row.oldest),
    newestCreatedAt: toDate(row.newest),
    expired: number(row.expired),
    stuck: number(row.stuck),
  };
}

/** An `IN_PROGRESS` record whose lease ran out: its request died or outlived the lease. */
export interface StuckRecord {
  scope: string;
  key: string;
  operation: string;
  createdAt: Date;
  /** When the lease ran out; `null` for a record that never had one. */
  lockedUntil: Date | null;
  expiresAt: Date;
}

/**
 * Lists `IN_PROGRESS` records past their lease, oldest first. The next request with the key takes
 * such a record over; the sweeper deletes it once it has expired.
 */
export async function stuckRecords(
  prisma: PrismaQueryable,
  options: StatsOptions & {
    /** @default 100 */
    limit?: number;
  } = {},
): Promise<StuckRecord[]> {
  const { now = new Date(), limit = 100 } = options;
  if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError('limit must be a positive integer');
  const provider = options.provider ?? providerOf(prisma);
  const sql = forProvider(
    provider,
    `SELECT scope, idempotency_key, operation, created_at, locked_until, expires_at FROM ${TABLE} ` +
      `WHERE ${STUCK} ORDER BY created_at LIMIT ${limit}`,
  );
  const rows = await standalone(prisma, provider, (client) =>
    client.$queryRawUnsafe<Record<string, unknown>[]>(sql, now),
  );
  return rows.map((row) => ({
    scope: String(row.scope),
    key: String(row.idempotency_key),
    operation: String(row.operation),
    createdAt: toDate(row.created_at) ?? new Date(0),
    lockedUntil: toDate(row.locked_until),
    expiresAt: toDate(row.expires_at) ?? new Date(0),
  }));
}
