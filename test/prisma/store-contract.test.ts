import { afterAll, beforeAll } from 'vitest';
import { type PrismaStore, prismaStore } from '../../src/prisma/index.js';
import { travel } from '../helpers/database-travel.js';
import { connect, describeEachDatabase } from '../helpers/databases.js';
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
    travel: (scope, ms) => travel(prisma, db.provider, scope, ms),
  }));
});
