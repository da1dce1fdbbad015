import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { type IdempotencyEvent, isIdempotencyError, runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachServerDatabase, type TestDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';

/**
 * `db`'s URL with a session lock wait shorter than the store's own wait for a duplicate
 * (`waitTimeoutMs`): PostgreSQL's `lock_timeout`, MariaDB's `innodb_lock_wait_timeout` (whole seconds).
 */
function withLockTimeout(db: TestDatabase): TestDatabase {
  const setting =
    db.provider === 'postgresql'
      ? 'options=-c%20lock_timeout%3D300'
      : 'initSql=SET@@session.innodb_lock_wait_timeout%3D1';
  return { ...db, url: `${db.url}${db.url?.includes('?') ? '&' : '?'}${setting}` };
}

// Two servers (two clients: duplicates in one process wait for each other before the database),
// whose sessions stop waiting for a lock long before the store's wait for a duplicate would end.
describeEachServerDatabase('a session lock timeout', (db) => {
  let first: Awaited<ReturnType<typeof connect>>;
  let second: Awaited<ReturnType<typeof connect>>;
  type Tx = Parameters<Parameters<typeof first.$transaction>[0]>[0];

  beforeAll(async () => {
    first = await connect(withLockTimeout(db));
    second = await connect(withLockTimeout(db));
  });
  afterAll(async () => {
    await first?.$disconnect();
    await second?.$disconnect();
  });

  const pay = (tx: Tx, scope: string) =>
    tx.payment.create({ data: { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' } });

  /** A transactional call on the first server that holds the key (its claim uncommitted) until released. */
  async function holdingKey(options: { scope: string; key: string; operation: string; input: unknown }) {
    const held = gate();
    const claimed = gate();
    const resolver = vi.fn(async (tx: unknown) => {
      claimed.open();
      const payment = await pay(tx as Tx, options.scope);
      await held.opened;
      return { id: payment.id };
    });
    const running = runIdempotent({ ...options, store: prismaStore(first) }, resolver);
    await claimed.opened;
    return {
      resolver,
      release: () => {
        held.open();
        return running;
      },
    };
  }

  // In lease mode (another procedure's policy on the same key) the claim commits on its own, and its
  // insert waits for the transaction that holds the key's row all the same.
  it.each(['transactional', 'lease'] as const)(
    'answers a %s duplicate whose claim waited it out IDEMPOTENCY_KEY_IN_PROGRESS (409), and its retry replays',
    async (mode) => {
      const options = {
        scope: uniqueScope(),
        key: 'k',
        operation: 'payments.create',
        input: { amount: '5.00' },
      };
      const holder = await holdingKey(options);
      const events: IdempotencyEvent[] = [];
      const duplicate = prismaStore(second, { mode });
      const resolver = vi.fn(async () => ({ id: -1 }));
      const error = await runIdempotent(
        { ...options, store: duplicate, waitTimeoutMs: 30_000, onEvent: (e) => events.push(e) },
        resolver,
      ).catch((e: unknown) => e);
      const ran = await holder.release();

      expect(error).toMatchObject({ code: 'IDEMPOTENCY_KEY_IN_PROGRESS', status: 409 });
      // The database's wait ended it, not the store's own 30 s wait.
      expect((error as Error).cause).toMatchObject({
        code: 'IDEMPOTENCY_KEY_IN_PROGRESS',
        message: expect.stringContaining('database stopped waiting'),
      });
      expect(events.map((e) => e.type)).toEqual(['in_progress']);
      const retry = await runIdempotent({ ...options, store: duplicate }, resolver);
      expect(retry).toMatchObject({ replayed: true, value: ran.value });
      expect([holder.resolver.mock.calls.length, resolver.mock.calls.length]).toEqual([1, 0]);
    },
  );

  it("leaves a resolver's own lock timeout its own error, and the key free", async () => {
    const scope = uniqueScope();
    const held = gate();
    const locked = gate();
    // Another server's transaction holds a payment row locked.
    const [payment] = await first.$transaction([
      first.payment.create({ data: { userId: scope, amount: new Decimal('1.00'), currency: 'EUR' } }),
    ]);
    const holding = first.$transaction(async (tx) => {
      await tx.payment.update({ where: { id: payment!.id }, data: { currency: 'USD' } });
      locked.open();
      await held.opened;
    });
    await locked.opened;

    const options = {
      store: prismaStore(second),
      scope,
      key: 'k',
      operation: 'payments.refund',
      input: { id: payment!.id },
    };
    const error = await runIdempotent(options, (tx) =>
      (tx as Tx).payment.update({ where: { id: payment!.id }, data: { currency: 'GBP' } }),
    ).catch((e: unknown) => e);
    held.open();
    await holding;

    expect(isIdempotencyError(error)).toBe(false);
    expect(String((error as Error).message)).toMatch(/lock timeout|Lock wait timeout/);
    // Nothing was kept: the retry runs the resolver.
    const retry = await runIdempotent(options, async () => 'refunded');
    expect(retry).toMatchObject({ replayed: false, value: 'refunded' });
  });
});
