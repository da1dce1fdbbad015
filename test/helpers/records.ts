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
 * Inserts records straight into `idempotency_records` with one multi-row INSERT per 2,000 rows
 * (11 parameters a row stays under every database's parameter limit), not one round trip a row.
 */
export async function insertRecords(
  prisma: PrismaQueryable,
  provider: 'sqlite' | 'postgresql' | 'mysql',
  rows: RecordRow[],
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
        '0'.repeat(64),
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
      `INSERT INTO idempotency_records (${COLUMNS.join(', ')}) VALUES ${tuples.join(', ')}`,
      ...values,
    );
  }
}

/** How many records a scope has. */
export async function countRecords(
  prisma: PrismaQueryable,
  provider: 'sqlite' | 'postgresql' | 'mysql',
  scope: string,
): Promise<number> {
  const rows = await prisma.$queryRawUnsafe<{ n: unknown }[]>(
    `SELECT COUNT(*) AS n FROM idempotency_records WHERE scope = ${provider === 'postgresql' ? '$1' : '?'}`,
    scope,
  );
  return Number(rows[0]?.n);
}

/** Inserts durable steps `names` (in that order) for the record `(scope, key)`. */
export async function insertSteps(
  prisma: PrismaQueryable,
  provider: 'sqlite' | 'postgresql' | 'mysql',
  scope: string,
  key: string,
  names: string[],
): Promise<void> {
  let n = 0;
  const placeholder = () => (provider === 'postgresql' ? `$${++n}` : '?');
  const columns = ['scope', 'idempotency_key', 'name', 'ordinal', 'fingerprint', 'result', 'expires_at'];
  const tuples = names.map(() => `(${columns.map(placeholder).join(', ')})`);
  const inADay = new Date(Date.now() + 86_400_000);
  const values = names.flatMap((name, i) => [scope, key, name, i, '0'.repeat(64), '{"json":1}', inADay]);
  await prisma.$executeRawUnsafe(
    `INSERT INTO idempotency_steps (${columns.join(', ')}) VALUES ${tuples.join(', ')}`,
    ...values,
  );
}
