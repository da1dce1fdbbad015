import type { PrismaQueryable } from '../../src/prisma/client.js';
import type { TestDatabase } from './databases.js';

/** SQL that moves a timestamp column `?` milliseconds into the past, per database. */
const earlier = {
  sqlite: (column: string) =>
    `strftime('%Y-%m-%dT%H:%M:%f+00:00', ${column}, printf('%+.3f seconds', -? / 1000.0))`,
  postgresql: (column: string) => `${column} - CAST(? AS bigint) * interval '1 millisecond'`,
  mysql: (column: string) => `${column} - INTERVAL (? * 1000) MICROSECOND`,
};

/**
 * Time passing for one scope's records in `table` and its durable steps (in `idempotency_steps`
 * beside it), as the database sees it: every stored time moves back by `ms`, which is what the
 * database's clock moving forward by `ms` means to them. The conformance suite's `travel`.
 */
export function recordTravel(
  prisma: PrismaQueryable,
  provider: TestDatabase['provider'],
  table = 'idempotency_records',
) {
  const schema = table.includes('.') ? `${table.slice(0, table.lastIndexOf('.'))}.` : '';
  const tables = {
    [table]: ['created_at', 'completed_at', 'expires_at', 'locked_until'],
    [`${schema}idempotency_steps`]: ['created_at', 'expires_at'],
  };
  return async (scope: string, ms: number): Promise<void> => {
    const shift = earlier[provider];
    for (const [name, columns] of Object.entries(tables)) {
      const set = columns.map((column) => `${column} = ${shift(column)}`).join(', ');
      let sql = `UPDATE ${name} SET ${set} WHERE scope = ?`;
      if (provider === 'postgresql') {
        let n = 0;
        sql = sql.replace(/\?/g, () => `$${++n}`);
      }
      await prisma.$executeRawUnsafe(sql, ...columns.map(() => ms), scope);
    }
  };
}
