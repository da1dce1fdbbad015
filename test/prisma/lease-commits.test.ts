import { afterAll, beforeAll, expect, it } from 'vitest';
import { runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';

// Through Prisma's SQLite adapter (one connection) a statement outside a transaction ran inside
// whichever transaction was open, and rolled back with it: a lease call that had returned success
// lost its record, and its retry charged again. Each lease step now commits on its own.
describeEachDatabase('a lease call beside another key’s transaction', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let store: ReturnType<typeof prismaStore<typeof prisma>>;
  beforeAll(async () => {
    prisma = await connect(db);
    store = prismaStore(prisma);
  });
  afterAll(() => prisma?.$disconnect());

  it('keeps its record when that transaction rolls back, and its retry replays', async () => {
    const scope = uniqueScope();
    const inside = gate();
    const release = gate();
    // Transactional call on key "other": claims, then waits inside its open transaction, then fails.
    const other = runIdempotent(
      { store, scope, key: 'other', operation: 'orders.create', input: {} },
      async () => {
        inside.open();
        await release.opened;
        throw new Error('validation failed: roll back');
      },
    ).catch((e: unknown) => e);
    await inside.opened;

    // Lease call on key "charge" (e.g. a payment gateway) runs to completion meanwhile.
    let charges = 0;
    const charge = () =>
      runIdempotent(
        { store, scope, key: 'charge', operation: 'payments.charge', input: { amount: 5 }, mode: 'lease' },
        async () => {
          charges++; // the external side effect
          return { charged: true };
        },
      );
    const first = charge();
    // Give the lease call time to run inside the other transaction, as it did before the fix.
    await new Promise((resolve) => setTimeout(resolve, 200));
    release.open();
    expect(await other).toBeInstanceOf(Error);
    expect((await first).replayed).toBe(false);

    // The client retries the charge with the same key: it must be replayed, not charged again.
    const record = await store.find(scope, 'charge');
    expect(record?.status).toBe('COMPLETED');
    const retry = await charge();
    expect(retry.replayed).toBe(true);
    expect(charges).toBe(1);
  });
});
