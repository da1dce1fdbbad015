import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  type IdempotencyEvent,
  IdempotencyKeyInProgressError,
  IdempotencyLeaseLostError,
  runIdempotent,
} from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Settles once the first call has claimed the key (its lease runs from then). */
const claimed = (types: () => string[]) =>
  expect.poll(types, { timeout: 10_000, interval: 10 }).toContain('claimed');

describeEachDatabase('prismaStore in lease mode', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let store: ReturnType<typeof prismaStore<typeof prisma>>;

  beforeAll(async () => {
    prisma = await connect(db);
    store = prismaStore(prisma);
  });
  afterAll(() => prisma?.$disconnect());

  const paymentsOf = (scope: string) => prisma.payment.count({ where: { userId: scope } });

  /**
   * A "gateway charge": one payment row written through `tx` (the plain client in lease mode, so
   * it commits at once), then held until `until()` settles.
   */
  function charge(
    scope: string,
    options: { leaseMs?: number; heartbeatMs?: number; waitTimeoutMs?: number } = {},
  ) {
    const events: IdempotencyEvent[] = [];
    let calls = 0;
    const run = (label: string, until: () => Promise<unknown> = async () => undefined) =>
      runIdempotent(
        {
          store,
          scope,
          key: 'charge-1',
          operation: 'payments.charge',
          input: { amount: '9.99' },
          mode: 'lease',
          onEvent: (event) => events.push(event),
          ...options,
        },
        async (tx) => {
          calls++;
          await tx.payment.create({ data: { userId: scope, amount: new Decimal('9.99'), currency: 'EUR' } });
          await until();
          return { charged: label };
        },
      );
    return { run, events, calls: () => calls, types: () => events.map((e) => e.type) };
  }

  it('runs one of 16 concurrent duplicates inside the lease and answers the other 15 with 409', async () => {
    const scope = uniqueScope();
    const { run, calls } = charge(scope);
    const held = gate();
    let answeredWhileHeld = 0;
    const requests = Array.from({ length: 16 }, () =>
      run('only', () => held.opened).catch((error: unknown) => {
        answeredWhileHeld++;
        return error;
      }),
    );
    for (let waited = 0; answeredWhileHeld < 15 && waited < 10_000; waited += 20) await sleep(20);
    expect(answeredWhileHeld).toBe(15);
    held.open();
    const outcomes = await Promise.all(requests);
    expect(calls()).toBe(1);
    expect(await paymentsOf(scope)).toBe(1);
    const conflicts = outcomes.filter((o) => o instanceof IdempotencyKeyInProgressError);
    expect(conflicts).toHaveLength(15);
    for (const conflict of conflicts) expect((conflict as IdempotencyKeyInProgressError).status).toBe(409);
    await expect(run('again')).resolves.toMatchObject({ value: { charged: 'only' }, replayed: true });
  });

  it('lets a request take over a lease that expired mid-resolver and fences the old owner’s completion', async () => {
    const scope = uniqueScope();
    const { run, calls, types } = charge(scope, { leaseMs: 300 });
    const held = gate();
    const old = run('old owner', () => held.opened);
    await claimed(types);
    await sleep(500);
    const takeover = await run('new owner');
    held.open();
    const error = await old.catch((e: unknown) => e);
    expect(takeover).toMatchObject({ value: { charged: 'new owner' }, replayed: false });
    expect(error).toBeInstanceOf(IdempotencyLeaseLostError);
    expect((error as IdempotencyLeaseLostError).code).toBe('IDEMPOTENCY_KEY_IN_PROGRESS');
    expect(types()).toEqual(['claimed', 'expired_takeover', 'completed', 'fenced']);
    expect(calls()).toBe(2);
    expect(await paymentsOf(scope)).toBe(2); // the lease ran out: both charges happened
    const stored = await store.find(scope, 'charge-1');
    expect(stored).toMatchObject({ status: 'COMPLETED', lockedUntil: null });
    expect(store.serializer!.deserialize(stored!.result!)).toEqual({ charged: 'new owner' });
    await expect(run('third')).resolves.toMatchObject({ value: { charged: 'new owner' }, replayed: true });
  });

  it('releases the claim when the resolver throws, and the retry runs', async () => {
    const scope = uniqueScope();
    const { run, calls, types } = charge(scope);
    await expect(run('first', () => Promise.reject(new Error('gateway 502')))).rejects.toThrow('gateway 502');
    expect(await store.find(scope, 'charge-1')).toBeNull();
    await expect(run('retry')).resolves.toMatchObject({ value: { charged: 'retry' }, replayed: false });
    expect(calls()).toBe(2);
    expect(types()).toEqual(['claimed', 'released', 'claimed', 'completed']);
    expect(await store.find(scope, 'charge-1')).toMatchObject({ status: 'COMPLETED' });
  });

  it('does not let an old owner’s release delete the claim that took over', async () => {
    const scope = uniqueScope();
    const { run, types } = charge(scope, { leaseMs: 300 });
    const failing = gate();
    const old = run('old', () => failing.opened.then(() => Promise.reject(new Error('late failure'))));
    await claimed(types);
    await sleep(500);
    const held = gate();
    const takeover = run('new', () => held.opened);
    for (let waited = 0; !types().includes('expired_takeover') && waited < 10_000; waited += 20)
      await sleep(20);
    failing.open();
    await expect(old).rejects.toThrow('late failure');
    expect(await store.find(scope, 'charge-1')).toMatchObject({ status: 'IN_PROGRESS' });
    held.open();
    await expect(takeover).resolves.toMatchObject({ value: { charged: 'new' }, replayed: false });
    expect(types()).toEqual(['claimed', 'expired_takeover', 'fenced', 'completed']);
  });

  it('keeps the lease of a long resolver alive with a heartbeat', async () => {
    const scope = uniqueScope();
    const { run, calls, types } = charge(scope, { leaseMs: 1_000, heartbeatMs: 200 });
    const first = run('slow', () => sleep(2_500));
    await claimed(types);
    await sleep(1_800); // well past the first lease
    // A duplicate that does not wait finds the lease still held.
    const { run: impatient } = charge(scope, { leaseMs: 1_000, waitTimeoutMs: 0 });
    await expect(impatient('duplicate')).rejects.toBeInstanceOf(IdempotencyKeyInProgressError);
    const during = await store.find(scope, 'charge-1');
    expect(during!.lockedUntil!.getTime()).toBeGreaterThan(Date.now());
    await expect(first).resolves.toMatchObject({ value: { charged: 'slow' }, replayed: false });
    expect(calls()).toBe(1);
  });

  it('runs every call in lease mode when the store is created with mode: lease', async () => {
    const leasing = prismaStore(prisma, { mode: 'lease', leaseMs: 5_000 });
    const scope = uniqueScope();
    const held = gate();
    const options = { store: leasing, scope, key: 'k', operation: 'op', input: {} };
    let claimed = false;
    const first = runIdempotent(options, () => {
      claimed = true;
      return held.opened.then(() => 'done');
    });
    for (let waited = 0; !claimed && waited < 10_000; waited += 20) await sleep(20);
    const record = await store.find(scope, 'k');
    expect(record).toMatchObject({
      status: 'IN_PROGRESS',
      ownerToken: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    expect(record!.lockedUntil!.getTime()).toBeGreaterThan(Date.now());
    await expect(
      runIdempotent({ ...options, waitTimeoutMs: 0 }, async () => 'duplicate'),
    ).rejects.toBeInstanceOf(IdempotencyKeyInProgressError);
    held.open();
    await expect(first).resolves.toMatchObject({ value: 'done', replayed: false });
  });
});
