import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import type { PrismaClient as SqliteClient } from '../../generated/sqlite/client.js';
import { IdempotencyStoreUnavailableError, runIdempotent } from '../../src/index.js';
import { classify } from '../../src/prisma/database-errors.js';
import { prismaStore } from '../../src/prisma/index.js';
import { type AbortNotice, type BackgroundAborts, backgroundAborts } from '../helpers/background-aborts.js';
import { uniqueScope } from '../helpers/databases.js';
import { countRecords } from '../helpers/records.js';
import { describeEachServer } from '../helpers/write-conflicts.js';

// A transaction the database aborts in the background, between the resolver's statements: a
// Galera node whose transaction lost certification to another node's write set, a CockroachDB
// transaction another one pushed. Its writes are gone; the session learns of it on a later
// statement, or not at all. Whatever the resolver throws then, nothing of that attempt committed:
// the store must run the transaction again, or answer a code the clients retry.

/** The three generated clients have the same models; one type keeps the test readable. */
type Client = SqliteClient;
type Tx = Parameters<Parameters<Client['$transaction']>[0]>[0];

/** The resolver's payment insert, in Prisma's SQL for either provider. */
const PAYMENT_INSERT = /^INSERT INTO\s+\S*payments\b/i;

/** The messages of `error`'s causes, depth first. */
function causes(error: unknown): string[] {
  const { message, cause, errors } = (error ?? {}) as {
    message?: string;
    cause?: unknown;
    errors?: unknown[];
  };
  return [String(message), ...(cause ? causes(cause) : []), ...(errors ?? []).flatMap(causes)];
}

describeEachServer('a transaction the database aborted in the background', (db) => {
  let aborts: BackgroundAborts;
  let prisma: Client;

  beforeAll(async () => {
    aborts = await backgroundAborts(db.url!, db.provider);
    const Generated = (db.provider === 'mysql'
      ? MysqlClient
      : PostgresClient) as unknown as typeof SqliteClient;
    prisma = new Generated({ adapter: aborts.adapter as never });
  });
  afterAll(() => prisma?.$disconnect());

  /**
   * One payment under one key. The resolver writes it and reads it back, as Prisma's `create`
   * itself does on MariaDB: a read-back that runs outside the aborted transaction finds nothing.
   */
  function payment(maxRetries = 3) {
    const scope = uniqueScope();
    const store = prismaStore(prisma, { maxRetries });
    let runs = 0;
    const run = () =>
      runIdempotent(
        { store, scope, key: 'pay-1', operation: 'payments.create', input: { amount: '5.00' } },
        async (tx: Tx) => {
          runs++;
          const row = await tx.payment.create({
            data: { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' },
          });
          const written = await tx.payment.findUnique({ where: { id: row.id } });
          return { paymentId: written!.id };
        },
      );
    const effects = async () => ({
      payments: await prisma.payment.count({ where: { userId: scope } }),
      records: await countRecords(prisma, db.provider, scope),
    });
    return { run, runs: () => runs, effects };
  }

  const notices: AbortNotice[] =
    db.provider === 'mysql'
      ? ['next statement', 'statement after next', 'never']
      : // PostgreSQL stands in for CockroachDB, which always says so on the next statement or later;
        // a session silently out of its transaction is Galera's alone.
        ['next statement', 'statement after next'];

  it.each(notices)(
    'noticed on the %s: the transaction runs again and the payment commits once',
    async (notice) => {
      const call = payment();
      aborts.plan({ after: PAYMENT_INSERT, notice });
      const before = aborts.aborted;
      const first = await call.run();
      expect(aborts.aborted - before).toBe(1);
      expect(call.runs()).toBe(2);
      expect(await call.effects()).toEqual({ payments: 1, records: 1 });
      expect(await call.run()).toEqual({ ...first, replayed: true });
      expect(call.runs()).toBe(2);
    },
  );

  it.each(notices)(
    'noticed on the %s, every time: 503 once the retries are spent, nothing committed, then a retry runs once',
    async (notice) => {
      const call = payment(2);
      aborts.plan({ after: PAYMENT_INSERT, notice, times: 3 });
      const error = await call.run().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      // Its cause is the database's conflict error, or what showed the transaction was gone.
      if (notice !== 'never') expect(classify(error)).toBe('writeConflict');
      else expect(JSON.stringify(causes(error))).toMatch(/no longer in one/);
      expect(call.runs()).toBe(3);
      expect(await call.effects()).toEqual({ payments: 0, records: 0 });
      // The clients retry a 503 with the same key.
      expect(await call.run()).toMatchObject({ replayed: false });
      expect(call.runs()).toBe(4);
      expect(await call.effects()).toEqual({ payments: 1, records: 1 });
    },
  );

  it('a resolver’s own error in a transaction nobody aborted is answered as thrown, after one run', async () => {
    const store = prismaStore(prisma);
    const scope = uniqueScope();
    const declined = new Error('card declined');
    let runs = 0;
    const error = await runIdempotent(
      { store, scope, key: 'pay-1', operation: 'payments.create', input: { amount: '5.00' } },
      async (tx: Tx) => {
        runs++;
        await tx.payment.create({ data: { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' } });
        throw declined;
      },
    ).catch((e: unknown) => e);
    expect(error).toBe(declined);
    expect(runs).toBe(1);
    expect(await prisma.payment.count({ where: { userId: scope } })).toBe(0);
  });
});
