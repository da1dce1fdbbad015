// What an AsyncLocalStorage costs the rest of the process once it is on: plain Prisma transactions,
// fresh keys and bare awaits in process, in rounds that alternate with one enabled and none, side by
// side in one run. `directStatements` opens the store's transactions in one and turns it off again
// once no opening waits: "without" is what a process using it runs with between openings, "with"
// what every process using it ran with before (and any process whose tracing keeps one on).
//
//   npm run bench:async-context -- [postgresql url]
//   (default: a database of its own, idempotent_mutations_bench)
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { runIdempotent } from 'idempotent-mutations';
import { prismaStore } from 'idempotent-mutations/prisma';
import { insertPayment, type PaymentInput } from './apps.js';
import { type BenchDatabase, openClient, openReads, prepareDatabase } from './databases.js';
import { burst, median } from './stats.js';

const database: BenchDatabase = {
  name: 'PostgreSQL',
  url: process.argv[2] ?? 'postgresql://postgres@127.0.0.1:5432/idempotent_mutations_bench',
  aliases: [],
};
const ROUNDS = 12;
const CALLS = 400;
const AWAITS = 20_000;
await prepareDatabase(database);
const prisma = await openClient(database.url);
const reads = await openReads(database.url);
const store = prismaStore(prisma, { reads });
const user = `async-context-${process.pid}`;
const input: PaymentInput = { amount: '9.99', currency: 'EUR' };
const plain = () => prisma.$transaction((tx) => insertPayment(tx, user, input));
const fresh = () =>
  runIdempotent(
    { store, scope: user, key: randomUUID(), operation: 'createPayment', input, firstAttempt: true },
    (tx) => insertPayment(tx as Parameters<typeof insertPayment>[0], user, input),
  );

async function timed(calls: number, run: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < calls; i++) await run();
  return (performance.now() - started) / calls;
}

try {
  for (let i = 0; i < 300; i++) await Promise.all([plain(), fresh()]);
  const times = {
    plain: { off: [] as number[], on: [] as number[] },
    fresh: { off: [] as number[], on: [] as number[] },
    'fresh keys at 32 at once': { off: [] as number[], on: [] as number[] },
    await: { off: [] as number[], on: [] as number[] },
  };
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of round % 2 ? (['on', 'off'] as const) : (['off', 'on'] as const)) {
      const storage = mode === 'on' ? new AsyncLocalStorage<object>() : undefined;
      storage?.enterWith({});
      times.plain[mode].push(await timed(CALLS, plain));
      times.fresh[mode].push(await timed(CALLS, fresh));
      const { ms } = await burst(fresh, { calls: CALLS, concurrency: 32 });
      times['fresh keys at 32 at once'][mode].push(ms / CALLS);
      times.await[mode].push(await timed(AWAITS, () => Promise.resolve()));
      storage?.disable();
    }
  }
  const line = (what: string, { off, on }: { off: number[]; on: number[] }, unit: (ms: number) => string) =>
    console.log(
      `${what}: ${unit(median(off))} without, ${unit(median(on))} with an AsyncLocalStorage on (${(median(on) / median(off)).toFixed(3)}×)`,
    );
  console.log(`Node ${process.version}, ${ROUNDS} rounds each, alternating`);
  line('plain Prisma transaction (PostgreSQL)', times.plain, (ms) => `${ms.toFixed(3)} ms`);
  line('fresh key (PostgreSQL, directStatements)', times.fresh, (ms) => `${ms.toFixed(3)} ms`);
  line(
    'fresh keys at 32 at once, time per call',
    times['fresh keys at 32 at once'],
    (ms) => `${ms.toFixed(3)} ms`,
  );
  line('await of a resolved promise', times.await, (ms) => `${(ms * 1000).toFixed(2)} µs`);
} finally {
  await prisma.payment.deleteMany({ where: { userId: user } });
  await prisma.$disconnect();
  await reads.dispose();
}
