import { afterAll, beforeAll, expect, it } from 'vitest';
import { type PrismaStore, prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase } from '../helpers/databases.js';
import { recordTravel } from '../helpers/record-travel.js';
import { connectRecordedAdapter, type RecordedAdapter } from '../helpers/recorded-adapter.js';
import { runStoreConformance } from '../helpers/store-conformance.js';

describeEachDatabase('prismaStore', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let adapter: RecordedAdapter;
  beforeAll(async () => {
    prisma = await connect(db);
    adapter = await connectRecordedAdapter(db.url!);
  });
  afterAll(async () => {
    await adapter?.reads.dispose();
    await prisma?.$disconnect();
  });

  // A store a call: each plays another server on the same database. Time passes for a scope's
  // records and steps as the database sees it (their stored times move back).
  runStoreConformance(db.name, () => ({
    store: () => prismaStore(prisma) as PrismaStore<unknown>,
    travel: recordTravel(prisma, db.provider),
  }));

  // The same contract with the reads outside transactions sent straight through a driver adapter.
  runStoreConformance(`${db.name}, reads through a driver adapter`, () => ({
    store: () => prismaStore(prisma, { reads: adapter.reads }) as PrismaStore<unknown>,
    travel: recordTravel(prisma, db.provider),
  }));

  it('sent the records and the steps it read through that adapter', () => {
    expect(adapter.queries.some((sql) => /FROM \S*idempotency_records/.test(sql))).toBe(true);
    expect(adapter.queries.some((sql) => /FROM \S*idempotency_steps/.test(sql))).toBe(true);
    expect(adapter.queries.every((sql) => sql.trimStart().startsWith('SELECT'))).toBe(true);
  });
});
