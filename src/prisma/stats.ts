import { type PrismaQueryable, type Provider, providerOf } from './client.js';
import { standalone } from './database-errors.js';
import { statsQuery, stuckQuery } from './maintenance-sql.js';
import { adapterSchemaOf, recordsTable, storeTables } from './records-table.js';
import { toDate } from './row.js';
import { textFor } from './sql.js';
import { stepsOfRecords } from './step-sql.js';

/** Counts over the records table, as the CLI's `stats` shows them. */
export interface RecordStats {
  total: number;
  inProgress: number;
  completed: number;
  /** When the oldest record still stored was created; `null` when there are none. */
  oldestCreatedAt: Date | null;
  newestCreatedAt: Date | null;
  /** Expired records the sweeper has not deleted yet (by the database's clock). */
  expired: number;
  /** `IN_PROGRESS` records whose lease ran out by the database's clock (see `stuckRecords`). */
  stuck: number;
}

/** Options of `recordStats` and `stuckRecords`. */
export interface StatsOptions {
  /** The database, when it cannot be read off the client. @default the client's generated provider */
  provider?: Provider | undefined;
  /**
   * The records table, `name` or `schema.name`, as for `prismaStore`.
   * @default 'idempotency_records', in the client's driver adapter's schema if it has one
   */
  table?: string | undefined;
}

/**
 * Counts records by status, expired and stuck (by the database's clock), with the oldest and
 * newest creation time, as stored.
 */
export async function recordStats(prisma: PrismaQueryable, options: StatsOptions = {}): Promise<RecordStats> {
  const provider = options.provider ?? providerOf(prisma);
  const sql = statsQuery(provider, recordsTable(provider, options.table, adapterSchemaOf(prisma)));
  const [row = {}] = await standalone(prisma, provider, (client) =>
    client.$queryRawUnsafe<Record<string, unknown>[]>(sql),
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
  /**
   * The durable steps its call completed, in order (`step(name, fn)`): the last one is how far
   * the call got; the next request with the key (and the same input) resumes after it. Empty when
   * the key's stored steps are not this call's to resume (an earlier call's, of another input or
   * expired), which the next request clears and runs again.
   */
  steps: string[];
}

/** How many records' steps one statement of `stuckRecords` reads. */
const STEPS_QUERY_RECORDS = 250;

/**
 * Lists `IN_PROGRESS` records past their lease by the database's clock, oldest first. The next
 * request with the key takes such a record over; the sweeper deletes it once it has expired.
 */
export async function stuckRecords(
  prisma: PrismaQueryable,
  options: StatsOptions & {
    /** @default 100 */
    limit?: number | undefined;
  } = {},
): Promise<StuckRecord[]> {
  const { limit = 100 } = options;
  const provider = options.provider ?? providerOf(prisma);
  const tables = storeTables(provider, options.table, adapterSchemaOf(prisma));
  const sql = stuckQuery(provider, limit, tables.records);
  const rows = await standalone(prisma, provider, (client) =>
    client.$queryRawUnsafe<Record<string, unknown>[]>(sql),
  );
  const stuck = rows.map((row) => ({
    scope: String(row.scope),
    key: String(row.idempotency_key),
    operation: String(row.operation),
    createdAt: toDate(row.created_at) ?? new Date(0),
    lockedUntil: toDate(row.locked_until),
    expiresAt: toDate(row.expires_at) ?? new Date(0),
    steps: [] as string[],
  }));
  const byKey = new Map(
    stuck.map((record, i) => [
      `${record.scope}\u0000${record.key}`,
      { record, fingerprint: String(rows[i]!.fingerprint), resumable: true },
    ]),
  );
  // The steps of a few hundred records a statement, whatever the limit: SQLite refuses a condition
  // 1,000 ORs deep, PostgreSQL a statement of more than 65,535 parameters.
  for (let start = 0; start < stuck.length; start += STEPS_QUERY_RECORDS) {
    const records = stuck.slice(start, start + STEPS_QUERY_RECORDS);
    const { text, values } = stepsOfRecords(provider, records, tables);
    const steps = await standalone(prisma, provider, (client) =>
      client.$queryRawUnsafe<Record<string, unknown>[]>(textFor(provider, text), ...values),
    );
    for (const step of steps) {
      const found = byKey.get(`${String(step.scope)}\u0000${String(step.idempotency_key)}`);
      if (!found) continue;
      found.record.steps.push(String(step.name));
      // As the next request decides (`StepJournal`): it resumes the key's steps only when every
      // one is the record's input's and still live, else it clears them all.
      found.resumable &&= String(step.fingerprint) === found.fingerprint && Number(step.live) === 1;
    }
  }
  for (const { record, resumable } of byKey.values()) if (!resumable) record.steps = [];
  return stuck;
}
