import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyLeaseLostError, memoryStore, runIdempotent, type Store } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A lease-mode call outlives its lease; a transactional call for the same key takes the record
 * over and is still running when the old owner completes. The old owner must be fenced.
 */
async function scenario(store: Store<unknown>, scope: string) {
  const base = { store, scope, key: 'k', operation: 'op', input: { a: 1 } };
  const aDone = gate();
  const bInside = gate();
  const bRelease = gate();
  const a = runIdempotent({ ...base, mode: 'lease', leaseMs: 50 }, async () => {
    await aDone.opened;
    return 'A';
  }).catch((e: unknown) => e);
  while (!(await store.find(scope, 'k'))) await sleep(5); // A claimed
  await sleep(120); // A's lease has run out
  const b = runIdempotent({ ...base, mode: 'transactional' }, async () => {
    bInside.open();
    await bRelease.opened;
    return 'B';
  });
  await bInside.opened; // B took the record over and runs
  aDone.open();
  await sleep(100);
  bRelease.open();
  const [aOutcome, bOutcome] = await Promise.all([a, b]);
  expect(bOutcome.value).toBe('B');
  const replay = await runIdempotent({ ...base }, async () => 'C');
  // Whatever A's caller was told must be what every retry replays.
  if (aOutcome instanceof Error) expect(aOutcome).toBeInstanceOf(IdempotencyLeaseLostError);
  else expect((aOutcome as { value: string }).value).toBe(replay.value);
}

describe('memoryStore', () => {
  it('fences a lease owner whose record a transaction took over', async () => {
    await scenario(memoryStore() as Store<unknown>, uniqueScope());
  });
});

describeEachDatabase('prismaStore', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma?.$disconnect());
  it('fences a lease owner whose record a transaction took over', async () => {
    await scenario(prismaStore(prisma) as Store<unknown>, uniqueScope());
  });
});
