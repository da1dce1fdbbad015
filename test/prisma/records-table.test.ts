import { randomBytes } from 'node:crypto';
import { PrismaPg } from '@prisma/adapter-pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import { runIdempotent } from '../../src/index.js';
import {
  adapterForUrl,
  type PrismaStore,
  prismaStore,
  recordStats,
  stuckRecords,
  sweepExpired,
} from '../../src/prisma/index.js';
import { connect, databases, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';
import { recordTravel } from '../helpers/record-travel.js';
import { copyRecordsTable, countRecords, insertRecords, insertSteps } from '../helpers/records.js';
import { runStoreConformance } from '../helpers/store-conformance.js';

type Prisma = Awaited<ReturnType<typeof connect>>;
const hourAgo = () => new Date(Date.now() - 3_600_000);
const inAnHour = () => new Date(Date.now() + 3_600_000);

describeEachDatabase('records in a table of their own (table option)', (db) => {
  const table = `records_${randomBytes(4).toString('hex')}`;
  let prisma: Prisma;
  beforeAll(async () => {
    prisma = await connect(db);
    await copyRecordsTable(prisma, db.provider, table);
  });
  afterAll(async () => {
    await prisma?.$executeRawUnsafe(`DROP TABLE ${table}`);
    await prisma?.$disconnect();
  });

  runStoreConformance(`${db.name}, table ${table}`, () => ({
    store: () => prismaStore(prisma, { table }) as PrismaStore<unknown>,
    travel: recordTravel(prisma, db.provider, table),
  }));

  it('keeps the records there and none in idempotency_records', async () => {
    const scope = uniqueScope();
    const call = () =>
      runIdempotent(
        { store: prismaStore(prisma, { table }), scope, key: 'k', operation: 'op', input: 1 },
        () => 'done',
      );
    await call();
    expect((await call()).replayed).toBe(true);
    expect(await countRecords(prisma, db.provider, scope, table)).toBe(1);
    expect(await countRecords(prisma, db.provider, scope)).toBe(0);
  });

  it('shares the in-memory wait of stores over this client that name this table, however they spell it', () => {
    expect(prismaStore(prisma, { table }).backend).toBe(prismaStore(prisma, { table }).backend);
    expect(prismaStore(prisma, { table }).backend).not.toBe(prismaStore(prisma).backend);
    expect(prismaStore(prisma, { table: 'idempotency_records' }).backend).toBe(prismaStore(prisma).backend);
  });

  // SQLite's one connection is the outer transaction's: see the README's Limits.
  it.skipIf(db.provider === 'sqlite')(
    'runs a call on this table inside one on idempotency_records with the same key: nobody holds it here',
    async () => {
      const scope = uniqueScope();
      const call = (store: PrismaStore<unknown>, operation: string, run: () => Promise<string>) =>
        runIdempotent({ store, scope, key: 'k', operation, input: {}, waitTimeoutMs: 2_000 }, run);
      const { value } = await call(prismaStore(prisma) as PrismaStore<unknown>, 'order', async () => {
        const billed = await call(
          prismaStore(prisma, { table }) as PrismaStore<unknown>,
          'bill',
          async () => 'billed',
        );
        return `order+${billed.value}`;
      });
      expect(value).toBe('order+billed');
    },
  );

  it('sweeps, counts and lists stuck records of that table', async () => {
    const scope = uniqueScope();
    // The table is this suite's alone once the conformance tests are done: clear it.
    await prisma.$executeRawUnsafe(`DELETE FROM ${table}`);
    await insertRecords(
      prisma,
      db.provider,
      [
        { scope, key: 'expired', expiresAt: hourAgo() },
        { scope, key: 'live', expiresAt: inAnHour() },
        {
          scope,
          key: 'stuck',
          status: 'IN_PROGRESS',
          ownerToken: 'a'.repeat(64),
          lockedUntil: hourAgo(),
          expiresAt: inAnHour(),
        },
      ],
      table,
    );
    expect(await recordStats(prisma, { table })).toMatchObject({ total: 3, expired: 1, stuck: 1 });
    expect((await stuckRecords(prisma, { table })).map((r) => r.key)).toEqual(['stuck']);
    expect(await sweepExpired(prisma, { table })).toBe(1);
    expect(await countRecords(prisma, db.provider, scope, table)).toBe(2);
  });

  it('keeps the steps of a call running in this table when idempotency_records is swept', async () => {
    const scope = uniqueScope();
    const running = { scope, key: 'running', status: 'IN_PROGRESS' as const, ownerToken: 'a'.repeat(64) };
    await insertRecords(
      prisma,
      db.provider,
      [{ ...running, lockedUntil: inAnHour(), expiresAt: inAnHour() }],
      table,
    );
    // Both tables' steps share idempotency_steps; this call has no record in idempotency_records.
    await insertSteps(prisma, db.provider, scope, 'running', ['reserve', 'charge']);
    await sweepExpired(prisma);
    const steps = await prismaStore(prisma, { table }).steps!.list(scope, 'running');
    expect(steps.map((step) => step.name)).toEqual(['reserve', 'charge']);
  });
});

const postgres = databases.find((db) => db.provider === 'postgresql')!;

(postgres.url ? describe : describe.skip)("records in the PrismaPg adapter's schema", () => {
  let isolated: IsolatedDatabase;
  let schema: string;
  /** Models and records in `schema`; its connections' search path is the default (public). */
  let prisma: Prisma;
  /** The same database, on the search path: where records went before the store honoured the schema. */
  let publicPrisma: Prisma;
  beforeAll(async () => {
    isolated = await isolatedDatabase(postgres);
    schema = isolated.name;
    const adapter = new PrismaPg({ connectionString: postgres.url! }, { schema });
    prisma = new PostgresClient({ adapter }) as unknown as Prisma;
    publicPrisma = await connect(postgres);
  });
  afterAll(async () => {
    await prisma?.$disconnect();
    await publicPrisma?.$disconnect();
    await isolated?.drop();
  });
  const inSchema = () => `"${schema}".idempotency_records`;

  runStoreConformance(
    'PostgreSQL, adapter schema',
    () => ({
      store: () => prismaStore(prisma) as PrismaStore<unknown>,
      travel: recordTravel(prisma, 'postgresql', inSchema()),
    }),
    // A PrismaPg of its own, not wrapped by directStatements: every statement through the client.
    { savepoints: false },
  );

  it("commits the record with the resolver's writes, both in the adapter's schema", async () => {
    const scope = uniqueScope();
    const store = prismaStore(prisma);
    const pay = () =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: { amount: 5 } }, (tx) =>
        tx.payment.create({ data: { userId: scope, amount: '5', currency: 'EUR' } }),
      );
    const first = await pay();
    expect((await pay()).value).toEqual(first.value);
    expect(await countRecords(prisma, 'postgresql', scope, inSchema())).toBe(1);
    expect(await countRecords(publicPrisma, 'postgresql', scope)).toBe(0);
    expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
    expect(await publicPrisma.payment.count({ where: { userId: scope } })).toBe(0);
  });

  it("sweeps and counts the adapter schema's records by default", async () => {
    const scope = uniqueScope();
    await prisma.$executeRawUnsafe(`DELETE FROM ${inSchema()}`);
    await insertRecords(prisma, 'postgresql', [{ scope, key: 'expired', expiresAt: hourAgo() }], inSchema());
    expect(await recordStats(prisma)).toMatchObject({ total: 1, expired: 1 });
    expect(await sweepExpired(prisma)).toBe(1);
    expect(await countRecords(prisma, 'postgresql', scope, inSchema())).toBe(0);
  });

  it('names the schema in table for a client whose adapter has none', async () => {
    const scope = uniqueScope();
    const store = prismaStore(publicPrisma, { table: `${schema}.idempotency_records` });
    await runIdempotent({ store, scope, key: 'k', operation: 'op', input: 1 }, () => 'done');
    expect(await countRecords(prisma, 'postgresql', scope, inSchema())).toBe(1);
    expect(await countRecords(publicPrisma, 'postgresql', scope)).toBe(0);
  });

  it('takes ?schema= of a URL given to adapterForUrl as the adapter schema', async () => {
    const scope = uniqueScope();
    const url = `${postgres.url}${postgres.url!.includes('?') ? '&' : '?'}schema=${schema}`;
    const client = new PostgresClient({ adapter: (await adapterForUrl(url)) as never });
    try {
      const store = prismaStore(client);
      await runIdempotent({ store, scope, key: 'k', operation: 'pay', input: 1 }, (tx) =>
        tx.payment.create({ data: { userId: scope, amount: '1', currency: 'EUR' } }),
      );
      expect(await countRecords(prisma, 'postgresql', scope, inSchema())).toBe(1);
      expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
    } finally {
      await client.$disconnect();
    }
  });
});
