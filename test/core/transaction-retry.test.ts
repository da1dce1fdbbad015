import { expect, it } from 'vitest';
import { memoryStore, runIdempotent, type Store } from '../../src/index.js';
import { gate } from '../helpers/gate.js';

it('bounds the claim of a transaction run again after a write conflict by waitTimeoutMs too', async () => {
  const base = memoryStore();
  const conflict = new Error('write conflict');
  const bClaimed = gate();
  const bFinish = gate();
  // Two processes on one database (each its own in-process single flight); A's store runs a
  // transaction again after a write conflict, as prismaStore does.
  const processA: Store<undefined> = {
    ...base,
    backend: {},
    async transaction(work) {
      try {
        return await base.transaction!(work);
      } catch (error) {
        if (error !== conflict) throw error;
        await bClaimed.opened; // meanwhile B claimed the key A's rollback freed
        return base.transaction!(work);
      }
    },
  };
  const processB: Store<undefined> = { ...base, backend: {} };
  const call = { scope: 'user-1', key: 'k-1', operation: 'pay', input: { amount: 1 }, waitTimeoutMs: 100 };
  let b: Promise<unknown> | undefined;
  let aRuns = 0;
  const a = runIdempotent({ ...call, store: processA }, async () => {
    aRuns++;
    b ??= runIdempotent({ ...call, store: processB }, async () => {
      bClaimed.open();
      await bFinish.opened;
      return 'B';
    });
    throw conflict;
  }).catch((error: unknown) => error);
  // B's resolver runs 2 s; A, waiting on B's claim in its second attempt, answers after its 100 ms.
  let bFinished = false;
  const finishB = setTimeout(() => {
    bFinished = true;
    bFinish.open();
  }, 2_000);
  const answer = await a;
  const bStillRunning = !bFinished;
  clearTimeout(finishB);
  bFinish.open();
  await b;
  expect(answer).toMatchObject({ code: 'IDEMPOTENCY_KEY_IN_PROGRESS' });
  expect(bStillRunning).toBe(true);
  expect(aRuns).toBe(1);
});
