import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import type { PrismaClient as SqliteClient } from '../../generated/sqlite/client.js';
import {
  IdempotencyOutcomeUnknownError,
  IdempotencyStoreUnavailableError,
  runIdempotent,
} from '../../src/index.js';
import { classify } from '../../src/prisma/database-errors.js';
import { prismaStore } from '../../src/prisma/index.js';
import { type AbortNotice, type BackgroundAborts, backgroundAborts } from '../helpers/background-aborts.js';
import { uniqueScope } from '../helpers/databases.js';
import { countRecords } from '../helpers/records.js';
import { describeEachServer } from '../helpers/write-conflicts.js';

// A transaction the database aborts in the background, between the resolver's statements: a
// Galera node whose transaction lost certification to another node's write set, a CockroachDB
// transaction another one pushed. Its writes are gone; the session learns of it on a later
// statement, or not at all. Whatever the resolver throws then, nothing of that attempt committed up
// to the abort: when a conflict error says so, the store must run the transaction again, or answer a
// code the clients retry; a session out of its transaction may have committed writes since, and the
// call must not run again.

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
  function payment(maxRetries = 3, replayErrors?: (error: unknown) => boolean) {
    const scope = uniqueScope();
    const store = prismaStore(prisma, { maxRetries });
    let runs = 0;
    const events: string[] = [];
    const run = () =>
      runIdempotent(
        {
          store,
          scope,
          key: 'pay-1',
          operation: 'payments.create',
          input: { amount: '5.00' },
          onEvent: ({ type }) => events.push(type),
          replayErrors,
        },
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
    return { run, runs: () => runs, effects, events: () => events };
  }

  // A session silently out of its transaction is Galera's alone; PostgreSQL stands in for
  // CockroachDB, which always says so on the next statement or later.
  const notices: AbortNotice[] = ['next statement', 'statement after next'];

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

  it('noticed only after a replayable error the abort caused: run again, the error not kept', async () => {
    // The read-back, outside the aborted transaction, finds nothing: the resolver's TypeError, which
    // this call would keep; but the savepoint went with the transaction, and the abort is noticed.
    const call = payment(3, (error) => error instanceof TypeError);
    aborts.plan({ after: PAYMENT_INSERT, notice: 'statement after next' });
    const first = await call.run();
    expect(call.runs()).toBe(2);
    expect(await call.effects()).toEqual({ payments: 1, records: 1 });
    expect(await call.run()).toEqual({ ...first, replayed: true });
  });

  it.each(notices)(
    'noticed on the %s, every time: 503 once the retries are spent, nothing committed, then a retry runs once',
    async (notice) => {
      const call = payment(2);
      aborts.plan({ after: PAYMENT_INSERT, notice, times: 3 });
      const error = await call.run().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      // Its cause is the database's conflict error.
      expect(classify(error)).toBe('writeConflict');
      expect(call.runs()).toBe(3);
      expect(await call.effects()).toEqual({ payments: 0, records: 0 });
      // The clients retry a 503 with the same key.
      expect(await call.run()).toMatchObject({ replayed: false });
      expect(call.runs()).toBe(4);
      expect(await call.effects()).toEqual({ payments: 1, records: 1 });
    },
  );

  if (db.provider === 'mysql') {
    it('never noticed, with only reads after it (the read-back finds nothing): runs again, the payment commits once', async () => {
      const call = payment();
      aborts.plan({ after: PAYMENT_INSERT, notice: 'never' });
      const first = await call.run();
      // Every write was answered inside the transaction, so it rolled back with it: a write conflict.
      expect(call.runs()).toBe(2);
      expect(call.events()).toEqual(['claimed', 'claimed', 'completed']);
      expect(await call.effects()).toEqual({ payments: 1, records: 1 });
      expect(await call.run()).toEqual({ ...first, replayed: true });
      expect(call.runs()).toBe(2);
    });

    it.each([
      ['writes again (a payment, committed on its own)', 1],
      ['sends an UPDATE that changes nothing', 0],
    ])(
      'never noticed, the resolver then %s: not run again, IDEMPOTENCY_OUTCOME_UNKNOWN',
      async (_, payments) => {
        const scope = uniqueScope();
        const store = prismaStore(prisma);
        let runs = 0;
        aborts.plan({ after: PAYMENT_INSERT, notice: 'never' });
        const error = await runIdempotent(
          { store, scope, key: 'pay-1', operation: 'payments.create', input: { amount: '5.00' } },
          async (tx: Tx) => {
            runs++;
            const data = { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' };
            await tx.payment.create({ data }).catch(() => undefined); // its read-back finds nothing
            if (payments) await tx.payment.create({ data }).catch(() => undefined);
            else await tx.$executeRawUnsafe('UPDATE payments SET currency = currency WHERE id = -1');
            throw new Error('the payment was not read back');
          },
        ).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(IdempotencyOutcomeUnknownError);
        expect(JSON.stringify(causes(error))).toMatch(/no longer in one/);
        expect(runs).toBe(1);
        // The caller is told to check before retrying: the write after the abort committed.
        expect(await prisma.payment.count({ where: { userId: scope } })).toBe(payments);
        expect(await countRecords(prisma, db.provider, scope)).toBe(0);
      },
    );

    it.each(['rethrows it', 'returns'])(
      'a resolver that catches the conflict error, writes again (it commits on its own), then %s: not run again, its write kept once',
      async (then) => {
        const scope = uniqueScope();
        const store = prismaStore(prisma);
        let runs = 0;
        aborts.plan({ after: PAYMENT_INSERT, notice: 'next statement' });
        const error = await runIdempotent(
          { store, scope, key: 'pay-1', operation: 'payments.create', input: { amount: '5.00' } },
          async (tx: Tx) => {
            runs++;
            const data = { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' };
            try {
              // Prisma's read-back of the row gets the conflict error.
              await tx.payment.create({ data });
            } catch (conflict) {
              // An outbox row, say, or the write again.
              await tx.payment.create({ data });
              if (then === 'rethrows it') throw conflict;
            }
            return 'paid';
          },
        ).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(IdempotencyOutcomeUnknownError);
        expect(runs).toBe(1);
        expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
        expect(await countRecords(prisma, db.provider, scope)).toBe(0);
      },
    );
  }

  if (db.provider === 'postgresql') {
    it.each(['its own error', 'the conflict'])(
      'a conflict the resolver rolls back to a savepoint and goes on from, then throws %s: its error, or 503 for the conflict, nothing committed',
      async (thrown) => {
        const scope = uniqueScope();
        const store = prismaStore(prisma, { maxRetries: 0 });
        const declined = new Error('card declined');
        const error = await runIdempotent(
          { store, scope, key: 'pay-1', operation: 'payments.create', input: { amount: '5.00' } },
          async (tx: Tx) => {
            await tx.$executeRawUnsafe('SAVEPOINT before_update');
            try {
              await tx.$executeRawUnsafe(
                `DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$`,
              );
            } catch (conflict) {
              await tx.$executeRawUnsafe('ROLLBACK TO SAVEPOINT before_update');
              await tx.payment.create({
                data: { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' },
              });
              throw thrown === 'the conflict' ? conflict : declined;
            }
            return 'paid';
          },
        ).catch((e: unknown) => e);
        if (thrown === 'the conflict') {
          // A write conflict left after the retries (none here): 503, which the clients retry.
          expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
        } else {
          expect(error).toBe(declined);
        }
        expect(await prisma.payment.count({ where: { userId: scope } })).toBe(0);
      },
    );
  }

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
