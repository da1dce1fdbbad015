import { PrismaPg } from '@prisma/adapter-pg';
import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import type { PrismaClient as SqliteClient } from '../../generated/sqlite/client.js';
import { runIdempotent } from '../../src/core/run-idempotent.js';
import { classify } from '../../src/prisma/database-errors.js';
import { prismaStore } from '../../src/prisma/store.js';
import { databases, uniqueScope } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';
import { countRecords } from '../helpers/records.js';

// CockroachDB answers every contention with SQLSTATE 40001 ("restart transaction"), which Prisma
// surfaces as P2034 from a model query and as P2010 (the database's code inside) from a raw one.
// A trigger raises the same 40001 for the first attempts of a SERIALIZABLE transaction on PostgreSQL.

const postgres = databases.find((db) => db.provider === 'postgresql')!;
/** The three generated clients have the same models; one type keeps the test readable. */
type Client = SqliteClient;
type Tx = Parameters<Parameters<Client['$transaction']>[0]>[0];

describe.runIf(postgres.url)(
  'serialization failures raised by the resolver’s own statements on PostgreSQL',
  () => {
    let isolated: IsolatedDatabase;
    let prisma: Client;

    beforeAll(async () => {
      isolated = await isolatedDatabase(postgres);
      // Model queries name their schema (public, unless told): point them at the isolated one too.
      const schema = /search_path%3D(\w+)/.exec(isolated.db.url!)![1];
      const adapter = new PrismaPg({ connectionString: isolated.db.url }, { schema });
      prisma = new PostgresClient({ adapter }) as unknown as Client;
      await prisma.$executeRawUnsafe('CREATE SEQUENCE serialization_faults');
      // A sequence is not rolled back with the transaction, so it counts attempts across retries.
      await prisma.$executeRawUnsafe(
        `CREATE FUNCTION fail_to_serialize() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF nextval('serialization_faults') <= current_setting('test.failures')::int THEN
           RAISE EXCEPTION 'could not serialize access due to read/write dependencies among transactions'
             USING ERRCODE = '40001';
         END IF;
         RETURN NEW;
       END $$`,
      );
      await prisma.$executeRawUnsafe(
        'CREATE TRIGGER fail_to_serialize BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION fail_to_serialize()',
      );
    });
    afterAll(async () => {
      await prisma?.$disconnect();
      await isolated?.drop();
    });

    const writes: [string, string, (tx: Tx, scope: string) => Promise<unknown>][] = [
      [
        'a model query',
        'P2034',
        (tx, scope) =>
          tx.order.create({ data: { userId: scope, sku: 'sku-1', quantity: 1, total: new Decimal(5) } }),
      ],
      [
        'a raw statement',
        'P2010',
        (tx, scope) =>
          tx.$executeRawUnsafe(
            `INSERT INTO orders (user_id, sku, quantity, total) VALUES ($1, 'sku-1', 1, 5)`,
            scope,
          ),
      ],
    ];

    /** One order per call; the first `failures` attempts of its write raise 40001. */
    async function order(write: (tx: Tx, scope: string) => Promise<unknown>, failures: number) {
      await prisma.$executeRawUnsafe("SELECT setval('serialization_faults', 1, false)");
      const scope = uniqueScope();
      const store = prismaStore(prisma, { maxRetries: 3, transaction: { isolationLevel: 'Serializable' } });
      const seen: unknown[] = [];
      let runs = 0;
      const run = () =>
        runIdempotent(
          { store, scope, key: 'order-1', operation: 'orders.create', input: { sku: 'sku-1' } },
          async (tx: Tx) => {
            runs++;
            await tx.$executeRawUnsafe(`SELECT set_config('test.failures', $1, true)`, String(failures));
            await tx.payment.create({ data: { userId: scope, amount: new Decimal(5), currency: 'EUR' } });
            try {
              await write(tx, scope);
            } catch (error) {
              seen.push((error as { code?: unknown }).code);
              throw error;
            }
            return { ordered: true };
          },
        );
      const effects = async () => ({
        orders: await prisma.order.count({ where: { userId: scope } }),
        payments: await prisma.payment.count({ where: { userId: scope } }),
        records: await countRecords(prisma, 'postgresql', scope),
      });
      return { run, seen, runs: () => runs, effects };
    }

    it.each(writes)('retries 40001 from %s (Prisma %s) and commits once', async (_from, code, write) => {
      const call = await order(write, 2);
      const first = await call.run();
      expect(first.replayed).toBe(false);
      expect(call.seen).toEqual([code, code]);
      expect(call.runs()).toBe(3);
      expect(await call.effects()).toEqual({ orders: 1, payments: 1, records: 1 });
      expect(await call.run()).toMatchObject({ replayed: true, value: { ordered: true } });
      expect(call.runs()).toBe(3);
    });

    it.each(writes)(
      'answers 503 for 40001 from %s once maxRetries runs are spent, with nothing committed',
      async (_from, _code, write) => {
        const call = await order(write, 10);
        const error = await call.run().catch((e: unknown) => e);
        expect(classify(error)).toBe('writeConflict');
        expect(error).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' });
        expect(call.runs()).toBe(4);
        expect(await call.effects()).toEqual({ orders: 0, payments: 0, records: 0 });
      },
    );

    describe('on the store’s own statements, with the store speaking CockroachDB’s SQL', () => {
      beforeAll(async () => {
        // The claim's INSERT fails with 40001 while the budget lasts: what CockroachDB answers a
        // claim that raced a duplicate's, in a transaction or alone (a lease claim).
        await prisma.$executeRawUnsafe('CREATE SEQUENCE claim_faults');
        await prisma.$executeRawUnsafe('CREATE TABLE claim_fault_budget (n int NOT NULL)');
        await prisma.$executeRawUnsafe('INSERT INTO claim_fault_budget VALUES (0)');
        await prisma.$executeRawUnsafe(
          `CREATE FUNCTION fail_claim() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF nextval('claim_faults') <= (SELECT n FROM claim_fault_budget) THEN
               RAISE EXCEPTION 'restart transaction: TransactionRetryWithProtoRefreshError'
                 USING ERRCODE = '40001';
             END IF;
             RETURN NEW;
           END $$`,
        );
        await prisma.$executeRawUnsafe(
          'CREATE TRIGGER fail_claim BEFORE INSERT ON idempotency_records FOR EACH ROW EXECUTE FUNCTION fail_claim()',
        );
      });

      it.each(['transactional', 'lease'] as const)(
        '%s mode: a claim that fails with 40001 twice runs again, and the mutation commits once',
        async (mode) => {
          await prisma.$executeRawUnsafe("SELECT setval('claim_faults', 1, false)");
          await prisma.$executeRawUnsafe('UPDATE claim_fault_budget SET n = 2');
          const store = prismaStore(prisma, { provider: 'cockroachdb', maxRetries: 3 });
          const scope = uniqueScope();
          let runs = 0;
          const run = () =>
            runIdempotent(
              { store, scope, key: 'pay-1', operation: 'payments.create', input: { amount: '5' }, mode },
              async (tx: Tx) => {
                runs++;
                const row = await tx.payment.create({
                  data: { userId: scope, amount: new Decimal(5), currency: 'EUR' },
                });
                return { paymentId: row.id };
              },
            );
          const first = await run();
          expect(runs).toBe(1);
          expect(await run()).toEqual({ ...first, replayed: true });
          expect(runs).toBe(1);
          expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
          expect(await countRecords(prisma, 'postgresql', scope)).toBe(1);
          // Two claims failed, the third went through; the replay claimed nothing.
          const [{ claims }] = await prisma.$queryRawUnsafe<[{ claims: number }]>(
            'SELECT last_value::int AS claims FROM claim_faults',
          );
          expect(claims).toBe(3);
        },
      );
    });
  },
);
