import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyTransactionExpiredError, runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import {
  connect,
  describeEachDatabase,
  describeEachServerDatabase,
  type TestDatabase,
  uniqueScope,
} from '../helpers/databases.js';
import type { HooksReport } from './async-storage-process.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `adapterForUrl`'s adapters let the store send its statements in a transaction straight through the
 * driver adapter (`directStatements`). What that must never change: a statement of the store's runs
 * in the call's own transaction, or not at all.
 */
function withClient(db: TestDatabase) {
  const state: { prisma: Awaited<ReturnType<typeof connect>> } = {} as never;
  beforeAll(async () => {
    state.prisma = await connect(db);
  });
  afterAll(() => state.prisma?.$disconnect());
  return state;
}

describeEachDatabase('the store’s statements sent through the driver adapter', (db) => {
  const client = withClient(db);

  it('are never sent once Prisma rolled the transaction back (its timeout): a step is not kept without its writes', async () => {
    const { prisma } = client;
    const store = prismaStore(prisma, { transaction: { timeout: 300 } });
    const scope = uniqueScope();
    const owner = { scope, key: 'k', ownerToken: 'a'.repeat(64) };
    const fingerprint = 'f'.repeat(64);
    const claimed = await store.lease.claim({
      ...owner,
      operation: 'op',
      fingerprint,
      ttlMs: 60_000,
      leaseMs: 60_000,
    });
    expect(claimed.claimed).toBe(true);
    const failure = await store
      .steps!.transaction(async ({ tx, save }) => {
        await (tx as typeof prisma).payment.create({
          data: { userId: scope, amount: new Decimal('9.90'), currency: 'EUR' },
        });
        // Prisma rolls the transaction back at 300 ms and gives its connection back to the pool.
        await sleep(700);
        return save({
          ...owner,
          name: 'pay',
          position: 0,
          fingerprint,
          result: '1',
          resultIsError: false,
        });
      })
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(IdempotencyTransactionExpiredError);
    // Sent on the released connection, the step would have committed on its own, without its payment.
    expect(await store.steps!.list(scope, 'k')).toEqual([]);
    expect(await prisma.payment.count({ where: { userId: scope } })).toBe(0);
  });
});

describeEachServerDatabase('a transaction the resolver opens of its own', (db) => {
  const client = withClient(db);

  it('is not taken for the call’s: the result is stored in the call’s transaction and replayed', async () => {
    const { prisma } = client;
    const store = prismaStore(prisma);
    const scope = uniqueScope();
    const call = () =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, async (tx) => {
        // Committed on its own, before the call's transaction stores the result.
        await prisma.$transaction((own) =>
          own.payment.create({ data: { userId: scope, amount: new Decimal('1.00'), currency: 'EUR' } }),
        );
        const payment = await (tx as typeof prisma).payment.create({
          data: { userId: scope, amount: new Decimal('9.90'), currency: 'EUR' },
        });
        return payment.id;
      });
    const first = await call();
    expect(first.replayed).toBe(false);
    expect(await call()).toEqual({ ...first, replayed: true });
    expect(await prisma.payment.count({ where: { userId: scope } })).toBe(2);
  });
});

describe('the AsyncLocalStorage the store opens its transactions in', () => {
  it('is on only while a transaction opens: between them, and in the resolver, no promise pays its hooks', async () => {
    const script = fileURLToPath(new URL('./async-storage-process.ts', import.meta.url));
    const url = `file:.tmp/async-storage-${randomUUID().slice(0, 8)}.db`;
    // A process of its own: another test's AsyncLocalStorage would turn the hooks on here.
    const report = await new Promise<HooksReport>((resolve, reject) => {
      const child = fork(script, [url], { execArgv: ['--import', 'tsx', '--conditions=source'] });
      child.once('message', (message) => resolve(message as HooksReport));
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`the process exited with ${code} before reporting`)));
    });
    expect(report.hooksOn).toEqual({
      'before any call': false,
      'in a resolver': false,
      'after a call': false,
      'after 20 calls at once': false,
      'after a failed call': false,
      'after a call Prisma refused': false,
      'in a resolver, adapter not wrapped': false,
      'after a call, adapter not wrapped': false,
    });
    expect(report.refusedOpening).not.toBe('it ran');
    // The wrapped adapter handed each call its own transaction: none of the store's statements went
    // through the client.
    expect(report.storeStatementsLogged).toBe(0);
    // 1 + 10 keys, each twice at once, and one on the unwrapped client: each ran once.
    expect(report.payments).toBe(12);
    expect(report.replays).toBe(10);
  });
});
