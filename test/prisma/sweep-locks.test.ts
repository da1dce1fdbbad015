import { afterAll, beforeAll, expect, it } from 'vitest';
import { prismaStore, sweepExpired } from '../../src/prisma/index.js';
import { connect, describeEachServerDatabase, type TestDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';

const FINGERPRINT = 'f'.repeat(64);

// SQLite has one writer: a sweep and a running transaction never overlap there.
describeEachServerDatabase('the sweeper next to a running takeover', sweepNextToTakeover);

function sweepNextToTakeover(db: TestDatabase) {
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
    release();
    await running;
    const swept = await sweeping;
    expect(waitedMs).toBeLessThan(1_500);
    // The sweep finished while b's resolver still ran, and had deleted a: the claim wrote it anew.
    expect(swept.beforeRelease).toBe(true);
    expect(reclaimed.claimed).toBe(true);
  });
}

// MariaDB: a step row of a running call is X-locked until its transaction ends (a transactional
// step). The steps half of the sweep waited for it (up to innodb_lock_wait_timeout, 50 s, and then
// failed after deleting records), holding what it had read: other calls' step saves waited too.
describeEachServerDatabase('the step sweep next to a running transactional step', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let other: Awaited<ReturnType<typeof connect>>;
  let sweeper: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    [prisma, other, sweeper] = await Promise.all([connect(db), connect(db), connect(db)]);
  });
  afterAll(async () => {
    await Promise.all([prisma?.$disconnect(), other?.$disconnect(), sweeper?.$disconnect()]);
  });

  it('finishes without waiting for the step, and another call’s step save does not wait either', async () => {
    const store = prismaStore(prisma);
    const neighbour = prismaStore(other);
    const scope = uniqueScope('step-sweep');
    const ownerToken = 'o'.repeat(64);
    // Two lease-mode calls, z and a, whose steps are written under their leases.
    for (const key of ['z', 'a']) {
      const claim = { scope, key, operation: 'op', fingerprint: FINGERPRINT, ttlMs: 3_600_000 };
      await store.lease!.claim({ ...claim, leaseMs: 3_600_000, ownerToken });
    }
    const step = (key: string, name: string) => ({
      scope,
      key,
      ownerToken,
      name,
      position: 0,
      fingerprint: FINGERPRINT,
      result: '1',
      resultIsError: false,
      ttlMs: 3_600_000,
    });
    const written = gate();
    const finish = gate();
    // A transactional step of call z: its row written, its transaction still open.
    const running = store.steps!.transaction(async ({ save }) => {
      await save(step('z', 'charge'));
      written.open();
      await finish.opened;
    });
    await written.opened;
    let released = false;
    const unblock = setTimeout(() => {
      released = true;
      finish.open();
    }, 10_000);
    try {
      await sweepExpired(sweeper);
      const saved = await neighbour.steps!.save(step('a', 'step-1'));
      expect({ saved, released }).toEqual({ saved: true, released: false });
    } finally {
      clearTimeout(unblock);
      finish.open();
      await running;
    }
  }, 30_000);
});
