import { afterAll, beforeAll, expect, it } from 'vitest';
import { floorPayment } from '../../bench/apps.js';
import type { BenchPrismaClient } from '../../bench/databases.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

// The benchmark's floor sends the store's statements the way the store does (past the client, the
// result with COMMIT on PostgreSQL): it must commit, with the record, as a fresh key does.
describeEachDatabase("the benchmark's floor", (db) => {
  let prisma: BenchPrismaClient;

  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma.$disconnect());

  it('commits one payment and its completed record', async () => {
    const user = uniqueScope();
    const paid = await floorPayment(prisma, user, 'floor-key', { amount: '12.50', currency: 'EUR' });
    expect(await prisma.payment.count({ where: { userId: user } })).toBe(1);
    const record = await prisma.idempotencyRecord.findUniqueOrThrow({
      where: { scope_key: { scope: user, key: 'floor-key' } },
    });
    expect(record.status).toBe('COMPLETED');
    expect(JSON.parse(record.result!)).toMatchObject({ id: paid.id, userId: user });
  });
});
