import { PrismaPg } from '@prisma/adapter-pg';
import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { PrismaClient } from '../../generated/postgresql/client.js';
import { IdempotencyStoreUnavailableError, runIdempotent } from '../../src/index.js';
import { withMethods } from '../../src/prisma/direct-statements.js';
import { adapterForUrl, directStatements, prismaStore } from '../../src/prisma/index.js';
import { databases, uniqueScope } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';

// On PostgreSQL a transactional call's result UPDATE rides ahead of COMMIT, unawaited, and is read
// once the transaction committed (`completesWithCommit`). A trigger makes that UPDATE fail in the
// database; a wrapped adapter makes it fail in the driver, after the database stored it.

/** While set, `failingResults`' transactions fail each result they sent, once it is answered. */
let failResultsNow = false;

/** `factory`, whose transactions fail results on the driver's side while `failResultsNow`. */
function failingResults(factory: PrismaPg): PrismaPg {
  return withMethods(factory, {
    connect: async (connect) =>
      withMethods((await connect()) as object, {
        startTransaction: async (start, ...args) =>
          withMethods((await start(...args)) as object, {
            queryRaw: async (queryRaw, query) => {
              const answer = await queryRaw(query);
              if (failResultsNow && (query as { sql: string }).sql.startsWith('WITH done AS')) {
                throw new Error('the driver gave up');
              }
              return answer;
            },
          }),
      }),
  });
}

const postgres = databases.find((db) => db.provider === 'postgresql')!;

describe.runIf(postgres.url)('the result sent with COMMIT on PostgreSQL', () => {
  let isolated: IsolatedDatabase;
  let pipelined: PrismaClient;
  let driverFailing: PrismaClient;

  beforeAll(async () => {
    isolated = await isolatedDatabase(postgres);
    pipelined = new PrismaClient({ adapter: (await adapterForUrl(isolated.db.url!)) as never });
    driverFailing = new PrismaClient({
      adapter: directStatements(failingResults(new PrismaPg(isolated.db.url!))),
    });
    await pipelined.$executeRawUnsafe('CREATE TABLE completion_faults (kind text NOT NULL)');
    await pipelined.$executeRawUnsafe("INSERT INTO completion_faults VALUES ('none')");
    // A sequence is not rolled back with the transaction, so it counts attempts across retries.
    await pipelined.$executeRawUnsafe('CREATE SEQUENCE completion_conflicts');
    await pipelined.$executeRawUnsafe(
      `CREATE FUNCTION completion_fault() RETURNS trigger LANGUAGE plpgsql AS $$
       DECLARE fault text;
       BEGIN
         SELECT kind INTO fault FROM completion_faults;
         IF fault = 'conflict' AND nextval('completion_conflicts') = 1 THEN
           RAISE EXCEPTION 'could not serialize access due to concurrent update' USING ERRCODE = '40001';
         END IF;
         RETURN NEW;
       END $$`,
    );
    await pipelined.$executeRawUnsafe(
      `CREATE TRIGGER completion_fault BEFORE UPDATE ON idempotency_records FOR EACH ROW
       WHEN (NEW.status = 'COMPLETED') EXECUTE FUNCTION completion_fault()`,
    );
  });
  afterAll(async () => {
    await pipelined?.$disconnect();
    await driverFailing?.$disconnect();
    await isolated?.drop();
  });

  const fault = async (kind: 'none' | 'conflict') => {
    await pipelined.$executeRawUnsafe('UPDATE completion_faults SET kind = $1', kind);
    await pipelined.$executeRawUnsafe("SELECT setval('completion_conflicts', 1, false)");
  };
  beforeEach(() => fault('none'));

  function payment(prisma: PrismaClient, scope: string) {
    const calls = { count: 0 };
    const run = () =>
      runIdempotent(
        { store: prismaStore(prisma), scope, key: 'k', operation: 'pay', input: {} },
        async (tx) => {
          calls.count++;
          const { id } = await tx.payment.create({
            data: { userId: scope, amount: new Decimal('9.99'), currency: 'EUR' },
          });
          return id;
        },
      );
    return { run, calls };
  }
  const paymentsOf = (scope: string) => pipelined.payment.count({ where: { userId: scope } });

  it('runs the transaction again when the result meets a write conflict, and commits once', async () => {
    const scope = uniqueScope();
    const { run, calls } = payment(pipelined, scope);
    await fault('conflict');
    await expect(run()).resolves.toMatchObject({ replayed: false });
    expect(calls.count).toBe(2);
    expect(await paymentsOf(scope)).toBe(1);
    await expect(run()).resolves.toMatchObject({ replayed: true });
  });

  it('answers 503, never a bare error, when the driver fails the result on its own side: COMMIT ran', async () => {
    const scope = uniqueScope();
    const { run, calls } = payment(driverFailing, scope);
    failResultsNow = true;
    const error = await run()
      .catch((e: unknown) => e)
      .finally(() => {
        failResultsNow = false;
      });
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    // The driver's words are the cause, for the server's logs; the message is ours.
    expect(String((error as Error).cause)).toContain('the driver gave up');
    // The payment and its record committed; the retry with the same key replays them.
    expect(await paymentsOf(scope)).toBe(1);
    await expect(run()).resolves.toMatchObject({ replayed: true });
    expect(calls.count).toBe(1);
  });
});
