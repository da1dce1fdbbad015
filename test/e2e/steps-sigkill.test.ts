import { expect, it } from 'vitest';
import { runCheckoutScenario } from '../../examples/checkout-steps/main.js';
import { connect, describeEachDatabase } from '../helpers/databases.js';
import { recordTravel } from '../helpers/record-travel.js';

describeEachDatabase('a three-step mutation whose server is killed between step 2 and step 3', (db) => {
  it('completes on another server process after the lease ran out; each step takes effect once', async () => {
    const prisma = await connect(db);
    try {
      const started = performance.now();
      const tally = await runCheckoutScenario({
        url: db.url,
        leaseMs: 60_000,
        // The database's clock moves past the killed server's lease instead of the test waiting a minute.
        beforeKill: (scope) => recordTravel(prisma, db.provider)(scope, 61_000),
      });
      expect(tally.killedBy).toBe('SIGKILL');
      expect({ reserved: tally.reserved, charged: tally.charged, receipts: tally.receipts }).toEqual({
        reserved: 1,
        charged: 1,
        receipts: 1,
      });
      expect(tally.result).toMatchObject({ chargeId: expect.stringMatching(/^ch_/) });
      expect(tally.retries).toEqual([tally.result, tally.result]);
      expect(performance.now() - started).toBeLessThan(60_000);
    } finally {
      await prisma.$disconnect();
    }
  }, 120_000);
});
