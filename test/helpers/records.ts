import type { PrismaQueryable } from '../../src/prisma/client.js';

/** A row for `insertRecords`; unset columns get a completed record's defaults. */
export interface RecordRow {
  scope: string;
  key: string;
  status?: 'IN_PROGRESS' | 'COMPLETED';
  lockedUntil?: Date | null;
  ownerToken?: string | null;
  createdAt?: Date;
  expiresAt: Date;
  /** @default '0' × 64, what `insertSteps` gives steps */
  fingerprint?: string;
}

const COLUMNS = [
  'scope',
  'idempotency_key',
  'operation',
  'fingerprint',
  'status',
  'result',
  'owner_token',
  'locked_until',
  'created_at',
  'completed_at',
  'expires_at',
];

/**
 * Inserts records straight into `idempotency_records` (or `table`, as SQL) with one multi-row
 * INSERT per 2,000 rows (11 parameters a row stays under every database's parameter limit), not one
 * round trip a row.
 */
export async function insertRecords(
  prisma: PrismaQueryable,
  provider: 'sqlite' | 'postgresql' | 'mysql',
  rows: RecordRow[],
  table = 'idempotency_records',
): Promise<void> {
  for (let start = 0; start < rows.length; start += 2_000) {
    const chunk = rows.slice(start, start + 2_000);
    let n = 0;
    const placeholder = () => (provider === 'postgresql' ? `$${++n}` : '?');
    const tuples = chunk.map(() => `(${COLUMNS.map(placeholder).join(', ')})`);
    const values = chunk.flatMap((row) => {
      const status = row.status ?? 'COMPLETED';
      const createdAt = row.createdAt ?? new Date(row.expiresAt.getTime() - 86_400_000);
      return [
        row.scope,
        row.key,
        'test.op',
        row.fingerprint ?? '0'.repeat(64),
        status,
        status === 'COMPLETED' ? '{"json":1}' : null,
        row.ownerToken ?? null,
        row.lockedUntil ?? null,
        createdAt,
        status === 'COMPLETED' ? createdAt : null,
        row.expiresAt,
      ];
    });
    await prisma.$executeRawUnsafe(
      `INSERT INTO ${table} (${COLUMNS.join(', ')}) VALUES ${tuples.join(', ')}`,
      ...values,
    );
  }
}

/** How many records a scope has (in `idempotency_records`, or `table` as SQL). */
export async function countRecords(
  prisma: PrismaQueryable,
  provider: 'sqlite' | 'postgresql' | 'mysql',
  scope: string,
  table = 'idempotency_records',
): Promise<number> {
  const rows = await prisma.$queryRawUnsafe<{ n: unknown }[]>(
    `SELECT COUNT(*) AS n FROM ${table} WHERE scope = ${provider === 'postgresql' ? '$1' : '?'}`,
    scope,
  );
  return Number(rows[0]?.n);
}

/** An empty copy of `idempotency_records`, with its keys and indexes, under `name`. */
export async function copyRecordsTable(
  prisma: PrismaQueryable,
  provider: 'sqlite' | 'postgresql' | 'mysql',
  name: string,
): Promise<void> {
  if (provider === 'postgresql') {
    await prisma.$executeRawUnsafe(`CREATE TABLE ${name} (LIKE idempotency_records INCLUDING ALL)`);
  } else if (provider === 'mysql') {
    await prisma.$executeRawUnsafe(`CREATE TABLE ${name} LIKE idempotency_records`);
  } else {
    const ddl = await prisma.$queryRawUnsafe<{ sql: string }[]>(
      "SELECT sql FROM sqlite_master WHERE tbl_name = 'idempotency_records' AND sql IS NOT NULL",
    );
    for (const { sql } of ddl) await prisma.$executeRawUnsafe(sql.replaceAll('idempotency_records', name));
  }
}

/** Inserts durable steps `names` (in that order) for the record `(scope, key)`, expiring in a day unless told. */
export async function insertSteps(
  prisma: PrismaQueryable,
  provider: 'sqlite' | 'postgresql' | 'mysql',
  scope: string,
  key: string,
  names: string[],
  expiresAt = new Date(Date.now() + 86_400_000),
): Promise<void> {
  let n = 0;
  const placeholder = () => (provider === 'postgresql' ? `$${++n}` : '?');
  const columns = ['scope', 'idempotency_key', 'name', 'ordinal', 'fingerprint', 'result', 'expires_at'];
  const tuples = names.map(() => `(${columns.map(placeholder).join(', ')})`);
  const values = names.flatMap((name, i) => [scope, key, name, i, '0'.repeat(64), '{"json":1}', expiresAt]);
  await prisma.$executeRawUnsafe(
    `INSERT INTO idempotency_steps (${columns.join(', ')}) VALUES ${tuples.join(', ')}`,
    ...values,
  );
}
