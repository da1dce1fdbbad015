import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore, runIdempotent, type Store } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function scenario(store: Store<unknown>, scope: string) {
  let calls = 0;
  const run = (input: unknown, fail: boolean) =>
    runIdempotent(
      {
        store,
        scope,
        key: 'pay-1',
        operation: 'payments.create',
        input,
        ttlMs: 300,
        replayErrors: (e) => (e as Error).message === 'card declined',
      },
      async () => {
        calls++;
        if (fail) throw new Error('card declined');
        return { ok: true };
      },
    );
  // The key was used long ago (its record has expired) ...
  await run({ amount: 1 }, false);
  await sleep(400);
  // ... and is reused now: the card is declined, a replayable error.
  calls = 0;
  await expect(run({ amount: 2 }, true)).rejects.toThrow('card declined');
  // The retry must replay the stored decline, not run the resolver again.
  await expect(run({ amount: 2 }, false)).rejects.toThrow('card declined');
  expect(calls).toBe(1);
}

describe('memoryStore', () => {
  it('stores a replayable error when the key had an expired record', async () => {
    await scenario(memoryStore() as Store<unknown>, uniqueScope());
  });
});

describeEachDatabase('prismaStore: replayable error on a key with an expired record', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma?.$disconnect());
  it('stores a replayable error when the key had an expired record', async () => {
    await scenario(prismaStore(prisma) as Store<unknown>, uniqueScope());
  });
});
