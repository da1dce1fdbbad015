import { afterAll, beforeAll } from 'vitest';
import { type PrismaStore, prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase } from '../helpers/databases.js';
import { recordTravel } from '../helpers/record-travel.js';
import { runStoreConformance } from '../helpers/store-conformance.js';

describeEachDatabase('prismaStore', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma?.$disconnect());

  // A store a call: each plays another server on the same database. Time passes for a scope's
  // records and steps as the database sees it (their stored times move back).
  runStoreConformance(db.name, () => ({
    store: () => prismaStore(prisma) as PrismaStore<unknown>,
    travel: recordTravel(prisma, db.provider),
  }));
});
