import { afterAll, beforeAll, expect, it } from 'vitest';
import { type PrismaStore, prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase } from '../helpers/databases.js';
import { recordTravel } from '../helpers/record-travel.js';
import { connectRecordedAdapter, type RecordedAdapter } from '../helpers/recorded-adapter.js';
import { runStoreConformance } from '../helpers/store-conformance.js';

describeEachDatabase('prismaStore', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let throughClient: Awaited<ReturnType<typeof connect>>;
  let adapter: RecordedAdapter;
  beforeAll(async () => {
    prisma = await connect(db);
    throughClient = await connect(db, { directStatements: false });
    adapter = await connectRecordedAdapter(db.url!);
  });
  afterAll(async () => {
    await adapter?.reads.dispose();
    await prisma?.$disconnect();
    await throughClient?.$disconnect();
  });

  // A store a call: each plays another server on the same database. Time passes for a scope's
  // records and steps as the database sees it (their stored times move back). Every statement goes
  // through the Prisma client, as with a driver adapter not wrapped by `directStatements`.
  runStoreConformance(
    `${db.name}, every statement through the client`,
    () => ({
      store: () => prismaStore(throughClient) as PrismaStore<unknown>,
      travel: recordTravel(throughClient, db.provider),
    }),
    // Through the client the store cannot refuse a resolver's straggling statement after going back
    // to a savepoint, so it takes none.
    { savepoints: false },
  );

  // The same contract as `adapterForUrl` sets it up: the store's statements in a transaction go
  // straight through the driver adapter's transaction (`directStatements`), and here the reads
  // outside transactions through a driver adapter of their own.
  runStoreConformance(`${db.name}, reads and statements in a transaction through driver adapters`, () => ({
    store: () => prismaStore(prisma, { reads: adapter.reads }) as PrismaStore<unknown>,
    travel: recordTravel(prisma, db.provider),
  }));

  it('sent the records and the steps it read through that adapter', () => {
    expect(adapter.queries.some((sql) => /FROM \S*idempotency_records/.test(sql))).toBe(true);
    expect(adapter.queries.some((sql) => /FROM \S*idempotency_steps/.test(sql))).toBe(true);
    expect(adapter.queries.every((sql) => sql.trimStart().startsWith('SELECT'))).toBe(true);
  });
});
