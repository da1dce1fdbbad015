import type { PrismaQueryable } from '../../src/prisma/client.js';

/** SQL that moves a timestamp column `?` milliseconds into the past, per database. */
const earlier = {
  sqlite: (column: string) =>
    `strftime('%Y-%m-%dT%H:%M:%f+00:00', ${column}, printf('%+.3f seconds', -? / 1000.0))`,
  postgresql: (column: string) => `${column} - CAST(? AS bigint) * interval '1 millisecond'`,
  mysql: (column: string) => `${column} - INTERVAL (? * 1000) MICROSECOND`,
};

/**
 * Time passing for one scope's records and steps, as the database sees it: every stored time moves
 * back by `ms`, which is what the database's clock moving forward by `ms` means to them.
 */
export async function travel(
  prisma: PrismaQueryable,
  provider: 'sqlite' | 'postgresql' | 'mysql',
  scope: string,
  ms: number,
): Promise<void> {
  const shift = earlier[provider];
  const numbered = (text: string) => {
    let n = 0;
    return provider === 'postgresql' ? text.replace(/\?/g, () => `$${++n}`) : text;
  };
  const moved = (columns: string[]) => columns.map((column) => `${column} = ${shift(column)}`).join(', ');
  const tables = {
    idempotency_records: ['created_at', 'completed_at', 'expires_at', 'locked_until'],
    idempotency_steps: ['created_at', 'expires_at'],
  };
  for (const [table, columns] of Object.entries(tables)) {
    await prisma.$executeRawUnsafe(
      numbered(`UPDATE ${table} SET ${moved(columns)} WHERE scope = ?`),
      ...columns.map(() => ms),
      scope,
    );
  }
}
