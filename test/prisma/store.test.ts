import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  IdempotencyResultTooLargeError,
  type RunIdempotentOptions,
  runIdempotent,
} from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { recordTravel } from '../helpers/record-travel.js';

describeEachDatabase('prismaStore', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let store: ReturnType<typeof prismaStore<typeof prisma>>;

  beforeAll(async () => {
    prisma = await connect(db);
    store = prismaStore(prisma);
  });
  afterAll(() => prisma?.$disconnect());

  /** The mutation under test: one payment row, written through the transaction client. */
  function createPayment(
    scope: string,
    key: string,
    amount = '12.50',
    extra: Partial<Omit<RunIdempotentOptions<typeof prisma>, 'store'>> & { store?: typeof store } = {},
  ) {
    const calls = { count: 0 };
    const run = () =>
      runIdempotent(
        {
          scope,
          key,
          operation: 'payments.create',
          input: { amount, currency: 'EUR' },
          ...extra,
          store: extra.store ?? store,
        },
        async (tx) => {
          calls.count++;
          const payment = await tx.payment.create({
            data: { userId: scope, amount: new Decimal(amount), currency: 'EUR' },
          });
          return { id: payment.id, amount: payment.amount, createdAt: payment.createdAt, note: undefined };
        },
      );
    return { run, calls };
  }

  const paymentsOf = (scope: string) => prisma.payment.count({ where: { userId: scope } });
  const recordOf = (scope: string, key: string) => store.find(scope, key);

  it('runs a fresh key once and replays the stored result, Date and Decimal intact', async () => {
    const scope = uniqueScope();
    const { run, calls } = createPayment(scope, 'k-1');
    const first = await run();
    const second = await run();
    expect(first.replayed).toBe(false);
    expect(second.replayed).toBe(true);
    expect(second.value).toEqual(first.value);
    expect(second.value.amount).toBeInstanceOf(Decimal);
    expect(second.value.amount.toString()).toBe('12.5');
    expect(second.value.createdAt).toBeInstanceOf(Date);
    expect('note' in second.value).toBe(true);
    expect(calls.count).toBe(1);
    expect(await paymentsOf(scope)).toBe(1);
    expect(second.record.firstSeenAt.getTime()).toBe(first.record.firstSeenAt.getTime());
  });

  it('32 concurrent calls with one key write one payment and all answer the same', async () => {
    const scope = uniqueScope();
    const { run, calls } = createPayment(scope, 'storm');
    const results = await Promise.all(Array.from({ length: 32 }, run));
    expect(calls.count).toBe(1);
    expect(await paymentsOf(scope)).toBe(1);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
    for (const result of results) expect(result.value).toEqual(results[0]!.value);
  });

  it('200 keys with 8 concurrent duplicates each write 200 payments', async () => {
    const scope = uniqueScope();
    // 1,600 transactions queue for a pool of 10 connections: give them time to get one, and the
    // duplicates as long to wait for their key (this counts executions; it times nothing).
    const patient = prismaStore(prisma, { transaction: { maxWait: 60_000, timeout: 60_000 } });
    const mutations = Array.from({ length: 200 }, (_, k) =>
      createPayment(scope, `key-${k}`, String(k + 1), { store: patient, waitTimeoutMs: 60_000 }),
    );
    const results = await Promise.all(mutations.flatMap(({ run }) => Array.from({ length: 8 }, run)));
    expect(mutations.map(({ calls }) => calls.count)).toEqual(Array(200).fill(1));
    expect(results.filter((r) => !r.replayed)).toHaveLength(200);
    expect(await paymentsOf(scope)).toBe(200);
  }, 120_000);

  it('a throwing resolver leaves no record and no payment, and the key can be retried', async () => {
    const scope = uniqueScope();
    let fail = true;
    const run = () =>
      runIdempotent({ store, scope, key: 'k', operation: 'payments.create', input: { a: 1 } }, async (tx) => {
        await tx.payment.create({ data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' } });
        if (fail) throw new Error('gateway timeout');
        return 'ok';
      });
    await expect(run()).rejects.toThrow('gateway timeout');
    expect(await recordOf(scope, 'k')).toBeNull();
    expect(await paymentsOf(scope)).toBe(0);
    fail = false;
    await expect(run()).resolves.toMatchObject({ value: 'ok', replayed: false });
    expect(await paymentsOf(scope)).toBe(1);
  });

  it('commits nothing when the result finds no claim to complete: the resolver deleted it', async () => {
    const scope = uniqueScope();
    const run = runIdempotent(
      { store, scope, key: 'k', operation: 'payments.create', input: {} },
      async (tx) => {
        await tx.payment.create({ data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' } });
        await tx.$executeRaw`DELETE FROM idempotency_records WHERE scope = ${scope}`;
        return 'ok';
      },
    );
    await expect(run).rejects.toThrow('The idempotency claim was not found to store its result');
    expect(await paymentsOf(scope)).toBe(0);
    expect(await recordOf(scope, 'k')).toBeNull();
  });

  // On PostgreSQL a failed statement aborts the transaction: the result cannot be stored, and the
  // COMMIT after it rolls back. (MariaDB and SQLite carry on: the rest commits, record included.)
  if (db.provider === 'postgresql') {
    it('commits nothing when the resolver swallowed a failed statement of its transaction', async () => {
      const scope = uniqueScope();
      const run = runIdempotent(
        { store, scope, key: 'k', operation: 'payments.create', input: {} },
        async (tx) => {
          await tx.payment.create({ data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' } });
          await tx.$executeRaw`SELECT 1 / 0`.catch(() => undefined);
          return 'ok';
        },
      );
      const error = await run.catch((e: unknown) => e);
      expect(error).toMatchObject({
        message: expect.stringMatching(
          /^The result cannot be stored: PostgreSQL had aborted the transaction after a statement of the resolver's failed and the resolver caught its error/,
        ),
        cause: expect.objectContaining({ message: expect.stringMatching(/current transaction is aborted/) }),
      });
      expect(await paymentsOf(scope)).toBe(0);
      expect(await recordOf(scope, 'k')).toBeNull();
    });
  }

  it('rejects the same key with another input as a mismatch and leaves the record as it was', async () => {
    const scope = uniqueScope();
    await createPayment(scope, 'k', '10.00').run();
    const before = await recordOf(scope, 'k');
    const mismatch = createPayment(scope, 'k', '99.00');
    const error = await mismatch.run().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyMismatchError);
    expect((error as IdempotencyKeyMismatchError).status).toBe(422);
    expect((error as IdempotencyKeyMismatchError).firstSeenAt).toEqual(before!.createdAt);
    expect(mismatch.calls.count).toBe(0);
    // liveForMs is read against the database's clock, which moved on.
    const { liveForMs: _before, ...kept } = before!;
    const { liveForMs: _after, ...after } = (await recordOf(scope, 'k'))!;
    expect(after).toEqual(kept);
    expect(await paymentsOf(scope)).toBe(1);
  });

  it('treats an expired record as unseen: it runs once more, then replays', async () => {
    const scope = uniqueScope();
    const { run, calls } = createPayment(scope, 'k', '5.00', { ttlMs: 60_000 });
    await run();
    // The database's clock past the record's expiry; the replay that follows is well within the next.
    await recordTravel(prisma, db.provider)(scope, 61_000);
    const again = await run();
    const replay = await run();
    expect(again.replayed).toBe(false);
    expect(replay.replayed).toBe(true);
    expect(calls.count).toBe(2);
    expect(await paymentsOf(scope)).toBe(2);
  });

  it('keeps two scopes with one key apart', async () => {
    const alice = uniqueScope('alice');
    const bob = uniqueScope('bob');
    const a = await createPayment(alice, 'shared-key').run();
    const b = await createPayment(bob, 'shared-key').run();
    expect(a.replayed).toBe(false);
    expect(b.replayed).toBe(false);
    expect(await paymentsOf(alice)).toBe(1);
    expect(await paymentsOf(bob)).toBe(1);
  });

  it('treats keys that differ only in case as two keys', async () => {
    const scope = uniqueScope();
    await createPayment(scope, 'Key-A').run();
    await createPayment(scope, 'key-a').run();
    expect(await paymentsOf(scope)).toBe(2);
  });

  it('makes a duplicate that waited past waitTimeoutMs fail with IN_PROGRESS, then replay once done', async () => {
    const scope = uniqueScope();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const options = {
      store,
      scope,
      key: 'slow',
      operation: 'payments.create',
      input: {},
      waitTimeoutMs: 200,
    };
    let holding = false;
    const first = runIdempotent(options, async (tx) => {
      holding = true;
      await tx.payment.create({ data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' } });
      await gate;
      return 'done';
    });
    await expect.poll(() => holding, { timeout: 10_000, interval: 10 }).toBe(true);
    const started = Date.now();
    const error = await runIdempotent(options, async () => 'duplicate ran').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyInProgressError);
    expect((error as IdempotencyKeyInProgressError).retryAfterMs).toBeGreaterThan(0);
    expect(Date.now() - started).toBeLessThan(2_000);
    release();
    await expect(first).resolves.toMatchObject({ value: 'done', replayed: false });
    await expect(runIdempotent(options, async () => 'duplicate ran')).resolves.toMatchObject({
      value: 'done',
      replayed: true,
    });
    expect(await paymentsOf(scope)).toBe(1);
  });

  it.each([
    ['after its write', false],
    // On PostgreSQL the failed statement aborts the transaction: going back to the claim recovers it.
    ['after a statement of its failed in the database', true],
  ])(
    'stores an error that replayErrors accepts, raised %s, in one transaction without its writes',
    async (_, failedStatement) => {
      const scope = uniqueScope();
      let calls = 0;
      let transactions = 0;
      const counting = Object.assign(Object.create(store) as typeof store, {
        transaction: (work: Parameters<NonNullable<typeof store.transaction>>[0]) => {
          transactions++;
          return store.transaction!(work);
        },
      });
      const declined = () => Object.assign(new Error('card declined'), { code: 'CARD_DECLINED' });
      const run = () =>
        runIdempotent(
          {
            store: counting,
            scope,
            key: 'declined',
            operation: 'payments.create',
            input: {},
            replayErrors: (e) => (e as { code?: string }).code === 'CARD_DECLINED',
          },
          async (tx) => {
            calls++;
            await tx.payment.create({ data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' } });
            if (failedStatement)
              await tx.$executeRawUnsafe('SELECT * FROM no_such_table').catch(() => undefined);
            throw declined();
          },
        );
      await expect(run()).rejects.toThrow('card declined');
      expect(transactions).toBe(1);
      await expect(run()).rejects.toMatchObject({ message: 'card declined', code: 'CARD_DECLINED' });
      expect(calls).toBe(1);
      expect(await paymentsOf(scope)).toBe(0);
      expect(await recordOf(scope, 'declined')).toMatchObject({ status: 'COMPLETED', resultIsError: true });
    },
  );

  it('fails closed when the result is over maxResultBytes: no record, no payment', async () => {
    const scope = uniqueScope();
    const run = runIdempotent(
      { store, scope, key: 'big', operation: 'payments.create', input: {}, maxResultBytes: 1_000 },
      async (tx) => {
        await tx.payment.create({ data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' } });
        return 'x'.repeat(2_000);
      },
    );
    await expect(run).rejects.toBeInstanceOf(IdempotencyResultTooLargeError);
    expect(await recordOf(scope, 'big')).toBeNull();
    expect(await paymentsOf(scope)).toBe(0);
  });

  it('stores keys wider than 255 characters where the column allows, and fails clearly where it does not', async () => {
    const scope = uniqueScope();
    const key = 'k'.repeat(300);
    const options = { store, scope, key, operation: 'op', input: {}, keyPolicy: { maxLength: 300 } };
    const run = () => runIdempotent(options, async () => 'ok');
    if (db.provider === 'mysql') {
      // VARCHAR(255): INSERT IGNORE would truncate it; refused before anything runs.
      await expect(run()).rejects.toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' });
      expect(await store.find(scope, key.slice(0, 255))).toBeNull();
    } else {
      await run();
      await expect(run()).resolves.toMatchObject({ value: 'ok', replayed: true });
    }
  });

  it('serves replays from localCache without a query', async () => {
    let queries = 0;
    const counted = new Proxy(prisma, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver);
        if (property === '$queryRawUnsafe') {
          return (...args: Parameters<typeof target.$queryRawUnsafe>) => {
            queries++;
            return target.$queryRawUnsafe(...args);
          };
        }
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const cached = prismaStore(counted, { localCache: { max: 10 } });
    const scope = uniqueScope();
    const options = { store: cached, scope, key: 'k', operation: 'op', input: {} };
    await runIdempotent(options, async () => 'first');
    await runIdempotent(options, async () => 'second'); // reads the record and caches it
    const before = queries;
    const third = await runIdempotent(options, async () => 'third');
    expect(third).toMatchObject({ value: 'first', replayed: true });
    expect(queries).toBe(before);
  });

  it('accepts a client extended with $extends', async () => {
    const extended = prisma.$extends({ client: { $hello: () => 'hi' } });
    const scope = uniqueScope();
    const result = await runIdempotent(
      { store: prismaStore(extended), scope, key: 'k', operation: 'op', input: {} },
      async (tx) => {
        await tx.payment.create({ data: { userId: scope, amount: new Decimal('2'), currency: 'EUR' } });
        return tx.payment.count({ where: { userId: scope } });
      },
    );
    expect(result.value).toBe(1);
  });
});

describeEachDatabase('prismaStore under SERIALIZABLE isolation', (db) => {
  it('retries serialization failures and still writes one payment for 16 duplicates', async () => {
    if (db.provider === 'sqlite') return; // SQLite is always serializable: one writer at a time.
    const prisma = await connect(db);
    try {
      const store = prismaStore(prisma, { transaction: { isolationLevel: 'Serializable' } });
      const scope = uniqueScope();
      let calls = 0;
      const run = () =>
        runIdempotent({ store, scope, key: 'k', operation: 'payments.create', input: {} }, async (tx) => {
          calls++;
          await tx.payment.create({ data: { userId: scope, amount: new Decimal('3'), currency: 'EUR' } });
          await new Promise((resolve) => setTimeout(resolve, 50));
          return 'paid';
        });
      const results = await Promise.all(Array.from({ length: 16 }, run));
      expect(results.map((r) => r.value)).toEqual(Array(16).fill('paid'));
      expect(calls).toBe(1);
      expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
    } finally {
      await prisma.$disconnect();
    }
  });
});
