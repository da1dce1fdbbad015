// A process of direct-statements.test.ts: runs the store's transactions through `adapterForUrl`'s
// wrapped adapter on a SQLite file, and reports whether Node's promise hooks were on at each point
// (an `AsyncLocalStorage` that is on turns them on for every promise of the process).
//
//   node --import tsx --conditions=source async-storage-process.ts <file: url>
import { executionAsyncResource } from 'node:async_hooks';
import { Decimal } from '@prisma/client/runtime/client';
import { PrismaClient } from '../../generated/sqlite/client.js';
import { migrate } from '../../scripts/migrate.js';
import { runIdempotent } from '../../src/core/run-idempotent.js';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import { prismaStore } from '../../src/prisma/store.js';

/** What the process saw. */
export interface HooksReport {
  /** Whether promise hooks were on, by moment. */
  hooksOn: Record<string, boolean>;
  payments: number;
  replays: number;
  /** The store's writes in Prisma's query log: none, when they go past the client. */
  storeStatementsLogged: number;
  /** How the store's transaction with a bad isolation level failed (before any transaction began). */
  refusedOpening: string;
}

/**
 * A continuation runs in a promise resource of its own only while promise hooks are on (Node 20 and
 * 22; on Node 24 `AsyncLocalStorage` has no hooks, and this is always false).
 */
const hooksOn = async () => {
  await null;
  return executionAsyncResource() instanceof Promise;
};

const [url] = process.argv.slice(2);
if (!url || !process.send) throw new Error('usage: async-storage-process.ts <file: url> (forked)');
await migrate(url);
const prisma = new PrismaClient({
  adapter: (await adapterForUrl(url)) as never,
  log: [{ emit: 'event', level: 'query' }],
});
let storeStatementsLogged = 0;
prisma.$on('query', ({ query }) => {
  // The store's reads go through the client here (no `reads`); its claims and completions must not.
  if (query.includes('idempotency_records') && !/^\s*SELECT/i.test(query)) storeStatementsLogged++;
});
const report: HooksReport = {
  hooksOn: { 'before any call': await hooksOn() },
  payments: 0,
  replays: 0,
  storeStatementsLogged: 0,
  refusedOpening: '',
};
const pay = (
  store: ReturnType<typeof prismaStore<PrismaClient>>,
  key: string,
  moment: string,
  resolver?: () => Promise<void>,
) =>
  runIdempotent({ store, scope: 'hooks', key, operation: 'pay', input: {} }, async (tx) => {
    report.hooksOn[moment] ||= await hooksOn();
    await resolver?.();
    return (tx as PrismaClient).payment.create({
      data: { userId: 'hooks', amount: new Decimal('1.00'), currency: 'EUR' },
    });
  });

const store = prismaStore(prisma);
await pay(store, 'one', 'in a resolver');
report.hooksOn['after a call'] = await hooksOn();
const calls = await Promise.all(
  Array.from({ length: 20 }, (_, i) => pay(store, `key-${i % 10}`, 'in a resolver')),
);
report.replays = calls.filter((call) => call.replayed).length;
report.hooksOn['after 20 calls at once'] = await hooksOn();
await pay(store, 'failing', 'in a resolver', async () => {
  throw new Error('declined');
}).catch(() => undefined);
report.hooksOn['after a failed call'] = await hooksOn();

// Prisma refuses the isolation level before it starts a transaction: the opening is never taken by
// the adapter, nor by the work.
const refusing = prismaStore(prisma, { transaction: { isolationLevel: 'Nonsense' as never } });
report.refusedOpening = await pay(refusing, 'refused', 'in a resolver').then(
  () => 'it ran',
  (error: Error) => error.message.split('\n')[0]!,
);
report.hooksOn['after a call Prisma refused'] = await hooksOn();

// A client whose adapter is not wrapped, in this process where another is: its store's statements go
// through the client, and the opening is taken as the work begins.
const unwrapped = new PrismaClient({
  adapter: (await adapterForUrl(url, { directStatements: false })) as never,
});
await pay(prismaStore(unwrapped), 'unwrapped', 'in a resolver, adapter not wrapped');
report.hooksOn['after a call, adapter not wrapped'] = await hooksOn();

report.storeStatementsLogged = storeStatementsLogged;
report.payments = await prisma.payment.count({ where: { userId: 'hooks' } });
await unwrapped.$disconnect();
await prisma.$disconnect();
process.send(report);
