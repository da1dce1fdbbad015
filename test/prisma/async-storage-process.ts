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
}

/** A continuation runs in its own promise resource only while promise hooks are on. */
const hooksOn = async () => {
  await null;
  return executionAsyncResource() instanceof Promise;
};

const [url] = process.argv.slice(2);
if (!url || !process.send) throw new Error('usage: async-storage-process.ts <file: url> (forked)');
await migrate(url);
const prisma = new PrismaClient({ adapter: (await adapterForUrl(url)) as never });
const store = prismaStore(prisma);
const report: HooksReport = { hooksOn: { 'before any call': await hooksOn() }, payments: 0, replays: 0 };
const pay = (key: string, resolver?: () => Promise<void>) =>
  runIdempotent({ store, scope: 'hooks', key, operation: 'pay', input: {} }, async (tx) => {
    report.hooksOn['in a resolver'] ||= await hooksOn();
    await resolver?.();
    return (tx as PrismaClient).payment.create({
      data: { userId: 'hooks', amount: new Decimal('1.00'), currency: 'EUR' },
    });
  });

await pay('one');
report.hooksOn['after a call'] = await hooksOn();
const calls = await Promise.all(Array.from({ length: 20 }, (_, i) => pay(`key-${i % 10}`)));
report.replays = calls.filter((call) => call.replayed).length;
report.hooksOn['after 20 calls at once'] = await hooksOn();
await pay('failing', async () => {
  throw new Error('declined');
}).catch(() => undefined);
report.hooksOn['after a failed call'] = await hooksOn();
report.payments = await prisma.payment.count({ where: { userId: 'hooks' } });
await prisma.$disconnect();
process.send(report);
