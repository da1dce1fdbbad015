// One "server process" of sqlite-lock-wait.test.ts: runs its mutations on a shared SQLite file
// while a 10 ms timer measures how late it fires, and reports what it saw to the parent.
//
//   node --import tsx --conditions=source sqlite-server-process.ts <file: url> <key,key,...>
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Decimal } from '@prisma/client/runtime/client';
import Database from 'better-sqlite3';
import { PrismaClient } from '../../generated/sqlite/client.js';
import { runIdempotent } from '../../src/core/run-idempotent.js';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import { prismaStore } from '../../src/prisma/store.js';

/** What a process reports when its calls are done. */
export interface ProcessReport {
  runs: number;
  replays: number;
  failures: string[];
  /** Time the calls spent beyond their own work: waiting for the lock. */
  waitedMs: number;
  /** The longest one synchronous better-sqlite3 call took (a busy wait blocks in it). */
  maxDriverCallMs: number;
  /** The longest the event loop was blocked (perf_hooks) and the latest a 10 ms timer fired. */
  maxDelayMs: number;
  maxTimerLateMs: number;
  timerFired: number;
}

const WORK_MS = 100;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const [url, keyList] = process.argv.slice(2);
if (!url || !keyList || !process.send)
  throw new Error('usage: sqlite-server-process.ts <url> <keys> (forked)');
const send = process.send.bind(process);

// Times every synchronous statement call of better-sqlite3 (what a busy wait blocks in), as the
// event-loop delay alone cannot tell a blocked process from one the CPU is busy elsewhere for.
let maxDriverCallMs = 0;
const statement = Object.getPrototypeOf(new Database(':memory:').prepare('SELECT 1')) as Record<
  string,
  unknown
>;
for (const method of ['run', 'get', 'all', 'iterate']) {
  const original = statement[method] as (...args: unknown[]) => unknown;
  statement[method] = function timed(this: unknown, ...args: unknown[]) {
    const started = performance.now();
    try {
      return original.apply(this, args);
    } finally {
      maxDriverCallMs = Math.max(maxDriverCallMs, performance.now() - started);
    }
  };
}

// The adapter as the library creates it from a URL: a short synchronous busy timeout.
const prisma = new PrismaClient({ adapter: (await adapterForUrl(url)) as never });
const store = prismaStore(prisma);
// Warm up (Prisma compiles each query shape once, which takes the CPU for a while): a payment
// written and rolled back, so that the measurement sees lock waits, not first-query work.
await prisma
  .$transaction(async (tx) => {
    await tx.payment.create({ data: { userId: 'warm-up', amount: new Decimal(5), currency: 'EUR' } });
    throw new Error('roll back the warm-up');
  })
  .catch(() => undefined);

const delay = monitorEventLoopDelay({ resolution: 5 });
const report: ProcessReport = {
  runs: 0,
  replays: 0,
  failures: [],
  waitedMs: 0,
  maxDriverCallMs: 0,
  maxDelayMs: 0,
  maxTimerLateMs: 0,
  timerFired: 0,
};

process.once('message', async () => {
  delay.enable();
  maxDriverCallMs = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    report.maxTimerLateMs = Math.max(report.maxTimerLateMs, now - last - 10);
    report.timerFired++;
    last = now;
  }, 10);
  for (const key of keyList.split(',')) {
    const started = performance.now();
    let ran = false;
    try {
      const result = await runIdempotent(
        { store, scope: 'sqlite-lock-wait', key, operation: 'payments.create', input: { key } },
        async (tx) => {
          ran = true;
          report.runs++;
          await tx.payment.create({ data: { userId: key, amount: new Decimal(5), currency: 'EUR' } });
          await sleep(WORK_MS); // work done while holding SQLite's write lock
          return { key };
        },
      );
      if (result.replayed) report.replays++;
    } catch (error) {
      report.failures.push(`${key}: ${(error as Error).message}`);
    }
    report.waitedMs += performance.now() - started - (ran ? WORK_MS : 0);
  }
  clearInterval(timer);
  delay.disable();
  report.maxDelayMs = delay.max / 1e6;
  report.maxDriverCallMs = maxDriverCallMs;
  await prisma.$disconnect();
  send(report, () => process.exit(0));
});
send('ready');
