import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prismaStore, sweepExpired } from '../../src/prisma/index.js';
import { MAX_BATCH_SIZE, sweepBatchDelete } from '../../src/prisma/maintenance-sql.js';
import { stepSweepBatchDelete } from '../../src/prisma/step-sql.js';
import {
  connect,
  databases,
  describeEachServerDatabase,
  type TestDatabase,
  uniqueScope,
} from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';
import { isolatedDatabase } from '../helpers/isolated-database.js';
import { countRecords, insertRecords, insertSteps } from '../helpers/records.js';

const FINGERPRINT = 'f'.repeat(64);

// SQLite has one writer: a sweep and a running transaction never overlap there.
describeEachServerDatabase('the sweeper next to running calls', sweepNextToRunningCalls);

function sweepNextToRunningCalls(db: TestDatabase) {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let sweeper: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    [prisma, sweeper] = await Promise.all([connect(db), connect(db)]);
  });
  afterAll(async () => {
    await Promise.all([prisma?.$disconnect(), sweeper?.$disconnect()]);
  });

  it('skips the record a running takeover holds: it deletes the others without waiting for that resolver, and their claims do not wait either', async () => {
    const store = prismaStore(prisma);
    const scope = uniqueScope('sweep-locks');
    const claim = (key: string, ttlMs: number) => ({
      scope,
      key,
      operation: 'op',
      fingerprint: FINGERPRINT,
      ttlMs,
    });
    for (const key of ['a', 'b']) {
      await store.transaction!(async (session) => {
        await session.claim(claim(key, 1));
        await session.complete({ scope, key, result: '"old"', resultIsError: false, ttlMs: 1 });
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 50)); // both have expired
    // A retry of b takes its expired record over; its resolver is still running.
    const tookOver = gate();
    const finish = gate();
    const running = store.transaction!(async (session) => {
      const claimed = await session.claim(claim('b', 3_600_000));
      if (claimed.claimed) throw new Error('b should have been taken over');
      await session.takeOver(claim('b', 3_600_000));
      tookOver.open();
      await finish.opened;
      await session.complete({ scope, key: 'b', result: '"new"', resultIsError: false, ttlMs: 3_600_000 });
    });
    await tookOver.opened;
    let released = false;
    const release = () => {
      released = true;
      finish.open();
    };
    const sweeping = sweepExpired(sweeper).then(() => ({ beforeRelease: !released }));
    await new Promise((resolve) => setTimeout(resolve, 300)); // the sweep's DELETE is under way
    // A retry of a claims it: it must not wait on a sweep that waits on b's resolver.
    const started = performance.now();
    const unblock = setTimeout(release, 3_000);
    const reclaimed = await store.transaction!(async (session) => session.claim(claim('a', 3_600_000)));
    const waitedMs = performance.now() - started;
    clearTimeout(unblock);
    // The sweep ends while b's resolver still runs, given time (a loaded machine, a shared table).
    await Promise.race([sweeping, new Promise((resolve) => setTimeout(resolve, 2_500))]);
    release();
    await running;
    const swept = await sweeping;
    expect(waitedMs).toBeLessThan(1_500);
    // The sweep finished while b's resolver still ran, and had deleted a: the claim wrote it anew.
    expect(swept.beforeRelease).toBe(true);
    expect(reclaimed.claimed).toBe(true);
  });

  const p = (n: number) => (db.provider === 'postgresql' ? `$${n}` : '?');
  const insertStep = `INSERT INTO idempotency_steps (scope, idempotency_key, name, ordinal, fingerprint, result, expires_at) VALUES (${p(1)}, ${p(2)}, 'step', 0, '${FINGERPRINT}', '1', ${p(3)})`;
  const EXPIRED = new Date('2000-01-01T00:00:00Z');
  const LIVE = new Date('2999-01-01T00:00:00Z');

  it('deletes the expired steps without waiting for a step another call has not committed, and that call saves its next step without waiting', async () => {
    const scope = uniqueScope('sweep-step-locks');
    // Expired steps whose record is gone, around (in key order) the step a running call has written.
    for (const key of ['k1', 'k3', 'k5']) await prisma.$executeRawUnsafe(insertStep, scope, key, EXPIRED);
    const wrote = gate();
    const finish = gate();
    const running = prisma.$transaction(
      async (tx) => {
        await tx.$executeRawUnsafe(insertStep, scope, 'k2', LIVE);
        wrote.open();
        await finish.opened;
      },
      { timeout: 60_000 },
    );
    await wrote.opened;
    let released = false;
    const unblock = setTimeout(() => {
      released = true;
      finish.open();
    }, 3_000);
    const sweeping = sweepExpired(sweeper).then(() => ({ beforeRelease: !released }));
    await new Promise((resolve) => setTimeout(resolve, 300)); // the sweep is under way
    // Another call saves a step (a key between the expired ones): it must not queue behind the sweep.
    const started = performance.now();
    await sweeper.$executeRawUnsafe(insertStep, scope, 'k4', LIVE);
    const waitedMs = performance.now() - started;
    const swept = await sweeping;
    clearTimeout(unblock);
    finish.open();
    await running;
    expect(swept.beforeRelease).toBe(true);
    expect(waitedMs).toBeLessThan(1_500);
    const left = await prisma.$queryRawUnsafe<{ idempotency_key: string }[]>(
      `SELECT idempotency_key FROM idempotency_steps WHERE scope = ${p(1)} ORDER BY idempotency_key`,
      scope,
    );
    expect(left.map((row) => row.idempotency_key)).toEqual(['k2', 'k4']);
  });
}

describeEachServerDatabase('a sweep on a database of its own, next to held rows', (shared) => {
  it('deletes every other expired record and step while a takeover and a transactional step hold theirs', async () => {
    // A database of its own: a batch is then most of the table, and MariaDB reads a batch's
    // DELETE by its keys as a scan of the whole table, held rows included.
    await onOwnDatabase(shared, async (prisma, sweeper) => {
      const scope = uniqueScope('sweep-held');
      const expiresAt = new Date('2000-01-01T00:00:00Z');
      const keys = Array.from({ length: 1_500 }, (_, i) => `k-${String(i).padStart(4, '0')}`);
      await insertRecords(
        prisma,
        shared.provider,
        keys.map((key) => ({ scope, key, expiresAt })),
      );
      for (const key of keys)
        await insertSteps(prisma, shared.provider, `${scope}-steps`, key, ['a'], expiresAt);
      const store = prismaStore(prisma);
      const held = gate();
      const finish = gate();
      // A takeover of k-0700 (live again) and a transactional step of another call, uncommitted.
      const running = store.transaction!(async (session) => {
        const claim = { scope, key: 'k-0700', operation: 'op', fingerprint: FINGERPRINT, ttlMs: 3_600_000 };
        await session.claim(claim);
        await session.takeOver(claim);
        await insertSteps(session.tx as never, shared.provider, `${scope}-steps`, 'k-0750-live', ['a']);
        held.open();
        await finish.opened;
      });
      await held.opened;
      let released = false;
      const unblock = setTimeout(() => {
        released = true;
        finish.open();
      }, 10_000);
      const deleted = await sweepExpired(sweeper, { batchSize: 1_000 });
      const beforeRelease = !released;
      clearTimeout(unblock);
      finish.open();
      await running;
      expect(beforeRelease).toBe(true);
      expect(deleted).toBe(1_499);
      expect(await countRecords(prisma, shared.provider, scope)).toBe(1);
      const steps = await prisma.$queryRawUnsafe<{ n: unknown }[]>(
        'SELECT COUNT(*) AS n FROM idempotency_steps',
      );
      expect(Number(steps[0]!.n)).toBe(1);
    });
  });

  it('ends at once when the steps it picks belong to a record a running call is writing', async () => {
    await onOwnDatabase(shared, async (prisma, sweeper) => {
      // An expired step of an earlier call of k (its record swept); a new call of k claims it: its
      // record is written, not committed, while its resolver runs.
      const scope = uniqueScope('sweep-claiming');
      await insertSteps(prisma, shared.provider, scope, 'k', ['a'], new Date('2000-01-01T00:00:00Z'));
      const claimed = gate();
      const finish = gate();
      const running = prismaStore(prisma).transaction!(async (session) => {
        await session.claim({ scope, key: 'k', operation: 'op', fingerprint: FINGERPRINT, ttlMs: 3_600_000 });
        claimed.open();
        await finish.opened;
      });
      await claimed.opened;
      let statements = 0;
      const counted = new Proxy(sweeper, {
        get(target, name) {
          const value = Reflect.get(target, name);
          if (typeof value !== 'function') return value;
          return (...args: unknown[]) => {
            if (name === '$executeRawUnsafe' || name === '$queryRawUnsafe') statements++;
            return value.apply(target, args);
          };
        },
      });
      const unblock = setTimeout(finish.open, 5_000);
      const started = performance.now();
      await sweepExpired(counted, { batchSize: 1 });
      const tookMs = performance.now() - started;
      clearTimeout(unblock);
      finish.open();
      await running;
      // It skipped that step (whether it is the new call's to clear is for the call to say), and
      // did not pick it again and again until the call ended.
      expect(tookMs).toBeLessThan(2_500);
      expect(statements).toBeLessThan(20);
    });
  });
});

const mariadb = databases.find((db) => db.provider === 'mysql')!;

describe.skipIf(!mariadb.url)('MariaDB: a sweep deletes the rows it picked by their primary key', () => {
  it('leaves the optimizer no other index, so no statistics can make it lock the row past the range', async () => {
    // With statistics taken while purge shrank the table (after a sweep), MariaDB ran the delete by
    // key through the expires_at range, which also locks the entry past it: a claim in progress
    // made the no-wait delete fail, and the picked rows stayed (CI: a sweep that deleted 0).
    await onOwnDatabase(mariadb, async (prisma) => {
      // Rows the statements find, sweepable: a const lookup of a missing row plans no index at all.
      const expiresAt = new Date('2000-01-01T00:00:00Z');
      await insertRecords(prisma, 'mysql', [
        { scope: 's', key: 'a', expiresAt },
        { scope: 's', key: 'b', expiresAt },
      ]);
      for (const key of ['a', 'b']) await insertSteps(prisma, 'mysql', 'gone', key, ['charge'], expiresAt);
      const records = [
        { scope: 's', idempotency_key: 'a' },
        { scope: 's', idempotency_key: 'b' },
      ];
      const steps = records.map((record) => ({ ...record, scope: 'gone', name: 'charge' }));
      const statements = [
        sweepBatchDelete('idempotency_records', records.slice(0, 1)),
        sweepBatchDelete('idempotency_records', records),
        stepSweepBatchDelete(steps.slice(0, 1)),
        stepSweepBatchDelete(steps),
      ];
      for (const { text, values } of statements) {
        const explain = text.replace(/^SET STATEMENT innodb_lock_wait_timeout = 0 FOR /, 'EXPLAIN ');
        expect(explain).toMatch(/^EXPLAIN DELETE /);
        const plan = await prisma.$queryRawUnsafe<{ table: string; possible_keys: string | null }[]>(
          explain,
          ...values,
        );
        const target = plan.filter((row) => row.table !== 'r');
        expect(target.map((row) => row.possible_keys)).toEqual(['PRIMARY']);
      }
    });
  });
});

describe.skipIf(!mariadb.url)('MariaDB: the deletes by key of the largest batch', () => {
  it(`bind ${MAX_BATCH_SIZE} records' and steps' keys within the 65,535 parameters of a statement`, async () => {
    await onOwnDatabase(mariadb, async (prisma) => {
      const records = Array.from({ length: MAX_BATCH_SIZE }, (_, i) => ({
        scope: 's',
        idempotency_key: `k${i}`,
      }));
      const steps = records.map((record) => ({ ...record, name: 'charge' }));
      for (const { text, values } of [
        sweepBatchDelete('idempotency_records', records),
        stepSweepBatchDelete(steps),
      ]) {
        await expect(prisma.$executeRawUnsafe(text, ...values)).resolves.toBe(0);
      }
    });
  });
});

/** Runs `test` with two clients (a call's, a sweeper's) on a database of its own, then drops it. */
async function onOwnDatabase(
  shared: TestDatabase,
  test: (
    prisma: Awaited<ReturnType<typeof connect>>,
    sweeper: Awaited<ReturnType<typeof connect>>,
  ) => Promise<void>,
): Promise<void> {
  const isolated = await isolatedDatabase(shared);
  const [prisma, sweeper] = await Promise.all([connect(isolated.db), connect(isolated.db)]);
  try {
    await test(prisma, sweeper);
  } finally {
    await Promise.all([prisma.$disconnect(), sweeper.$disconnect()]);
    await isolated.drop();
  }
}
