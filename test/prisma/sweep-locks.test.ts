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
