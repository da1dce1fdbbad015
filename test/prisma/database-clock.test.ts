import { afterAll, beforeAll, expect, it } from 'vitest';
import { databaseClock } from '../../src/prisma/database-clock.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

/**
 * What the store writes as "now" has come by the database's clock as soon as it is written: a
 * lease ended now (`extend(owner, 0)`) is over for the very next request. PostgreSQL reads its
 * clock in microseconds and `timestamp(3)` used to round them up to half a millisecond, so for
 * that half millisecond an ended lease was still held (a 422 instead of a takeover, seen in CI).
 * The stored value and the comparison share one statement here, so one clock reading: no race.
 */
describeEachDatabase('the database clock', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  const scope = uniqueScope();
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(async () => {
    await prisma?.$executeRawUnsafe(`DELETE FROM idempotency_records WHERE scope = '${scope}'`);
    await prisma?.$disconnect();
  });

  it('stores now as a time that has come, at once', async () => {
    const clock = databaseClock(db.provider);
    const passed: unknown[] = [];
    // Half of PostgreSQL's readings rounded up: 40 of them all passing is no accident.
    for (let i = 0; i < 40; i++) {
      const [row] = await prisma.$queryRawUnsafe<{ passed: unknown }[]>(
        'INSERT INTO idempotency_records (scope, idempotency_key, operation, fingerprint, status, ' +
          `locked_until, created_at, expires_at) VALUES ('${scope}', 'k-${i}', 'op', 'f', 'IN_PROGRESS', ` +
          `${clock.now}, ${clock.now}, ${clock.now}) RETURNING ${clock.passed('locked_until')} AS passed`,
      );
      passed.push(Number(row!.passed));
    }
    expect(passed).toEqual(passed.map(() => 1));
  });
});
