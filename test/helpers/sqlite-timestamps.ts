import { PrismaBetterSqlite3 } from '@prisma/adapter-better-sqlite3';
import { PrismaClient } from '../../generated/sqlite/client.js';
import type { RecordRow } from './records.js';

/**
 * The ways an SQLite file holds its timestamps: integers of epoch milliseconds (what the driver
 * adapter writes with `timestampFormat: 'unixepoch-ms'`), ISO text ending in `+00:00` (what it
 * writes by default), and `YYYY-MM-DD HH:MM:SS` text (what a `CURRENT_TIMESTAMP` column default
 * writes).
 */
export const sqliteTimestampFormats = ['YYYY-MM-DD HH:MM:SS', 'iso8601', 'unixepoch-ms'] as const;
export type SqliteTimestampFormat = (typeof sqliteTimestampFormats)[number];

const DAY = 86_400_000;

/** Writes `rows` into the SQLite database at `url` with every timestamp in `format`. */
export async function writeRecordsAs(
  url: string,
  format: SqliteTimestampFormat,
  rows: RecordRow[],
): Promise<void> {
  const adapter = new PrismaBetterSqlite3(
    { url },
    { timestampFormat: format === 'unixepoch-ms' ? 'unixepoch-ms' : 'iso8601' },
  );
  const prisma = new PrismaClient({ adapter });
  const data = rows.map((row) => {
    const status = row.status ?? 'COMPLETED';
    const createdAt = row.createdAt ?? new Date(row.expiresAt.getTime() - DAY);
    return {
      scope: row.scope,
      key: row.key,
      operation: 'test.op',
      fingerprint: '0'.repeat(64),
      status,
      result: status === 'COMPLETED' ? '{"json":1}' : null,
      ownerToken: row.ownerToken ?? null,
      lockedUntil: row.lockedUntil ?? null,
      createdAt,
      completedAt: status === 'COMPLETED' ? createdAt : null,
      expiresAt: row.expiresAt,
    };
  });
  try {
    if (format !== 'YYYY-MM-DD HH:MM:SS') {
      await prisma.idempotencyRecord.createMany({ data });
      return;
    }
    const text = (date: Date | null) => (date ? date.toISOString().slice(0, 19).replace('T', ' ') : null);
    for (const row of data) {
      await prisma.$executeRawUnsafe(
        'INSERT INTO idempotency_records (scope, idempotency_key, operation, fingerprint, status, result, ' +
          'owner_token, locked_until, created_at, completed_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
        row.scope,
        row.key,
        row.operation,
        row.fingerprint,
        row.status,
        row.result,
        row.ownerToken,
        text(row.lockedUntil),
        text(row.createdAt),
        text(row.completedAt),
        text(row.expiresAt),
      );
    }
  } finally {
    await prisma.$disconnect();
  }
}

/** How `key`'s expiry is stored: its SQLite type and its value. */
export async function storedExpiry(url: string, key: string): Promise<{ type: string; value: unknown }> {
  const prisma = new PrismaClient({ adapter: new PrismaBetterSqlite3({ url }) });
  try {
    const [row] = await prisma.$queryRawUnsafe<{ type: string; value: unknown }[]>(
      'SELECT typeof(expires_at) AS type, CAST(expires_at AS TEXT) AS value FROM idempotency_records WHERE idempotency_key = ?',
      key,
    );
    return row!;
  } finally {
    await prisma.$disconnect();
  }
}
