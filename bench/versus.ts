// This working tree's fresh key against another commit's, side by side in one process on PostgreSQL:
// each side has its own copy of the library (the commit's `src` is extracted into `.tmp/versus/`), its
// own client and store, and runs the same mutation. Concurrency 1 alternates the two call by call
// (the ratio of their median times, and the median of each pair's difference); concurrency 32
// alternates bursts (the median of each pair's ratio). With the commit the tree is at (and no change),
// the two sides run the same code: what that prints is the harness's own noise.
//
//   npm run bench:versus -- <commit> [postgresql url]
//   (default: a database of its own, idempotent_mutations_profile)
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PrismaClient } from '../generated/postgresql/client.js';
import type * as Core from '../src/index.js';
import type * as Prisma from '../src/prisma/index.js';
import { insertPayment, type PaymentInput } from './apps.js';
import { prepareDatabase } from './databases.js';
import { burst, median, orderOf } from './stats.js';

const [revision, url = 'postgresql://postgres@127.0.0.1:5432/idempotent_mutations_profile'] =
  process.argv.slice(2);
if (!revision) throw new Error('usage: npm run bench:versus -- <commit> [postgresql url]');
const PAIRS = 2_000;
const WARMUP = 200;
const BURSTS = 30;
const BURST_CALLS = 400;
const CONCURRENCY = 32;

const commit = execFileSync('git', ['rev-parse', '--short', revision], { encoding: 'utf8' }).trim();
const root = path.resolve('.tmp/versus', commit);
rmSync(root, { recursive: true, force: true });
mkdirSync(root, { recursive: true });
execFileSync('sh', ['-c', `git archive ${commit} src | tar -x -C '${root}'`]);

/** One side: a copy of the library, with a client and a store of its own. */
async function sideOf(src: string) {
  const core = (await import(path.join(src, 'index.ts'))) as typeof Core;
  const prisma = (await import(path.join(src, 'prisma/index.ts'))) as typeof Prisma;
  const client = new PrismaClient({ adapter: (await prisma.adapterForUrl(url)) as never });
  const reads = await (await prisma.adapterForUrl(url)).connect();
  const store = prisma.prismaStore(client, { reads: reads as Prisma.PrismaStoreOptions['reads'] });
  const user = `versus-${randomUUID()}`;
  const input: PaymentInput = { amount: '9.99', currency: 'EUR' };
  return {
    fresh: () =>
      core.runIdempotent(
        { store, scope: user, key: randomUUID(), operation: 'createPayment', input, firstAttempt: true },
        (tx) => insertPayment(tx as Parameters<typeof insertPayment>[0], user, input),
      ),
    async close() {
      await client.payment.deleteMany({ where: { userId: user } });
      await client.$disconnect();
      await (reads as { dispose?(): Promise<void> }).dispose?.();
    },
  };
}

await prepareDatabase({ name: 'PostgreSQL', url, aliases: [] });
const sides = { tree: await sideOf(path.resolve('src')), [commit]: await sideOf(path.join(root, 'src')) };
const names = Object.keys(sides);
const loadAtStart = os.loadavg()[0]!;
const started = performance.now();
try {
  const times: Record<string, number[]> = { tree: [], [commit]: [] };
  for (let pair = 0; pair < WARMUP + PAIRS; pair++) {
    for (const name of orderOf(names, pair)) {
      const start = performance.now();
      await sides[name]!.fresh();
      if (pair >= WARMUP) times[name]!.push(performance.now() - start);
    }
  }
  const differences = times.tree!.map((ms, i) => (ms - times[commit]![i]!) * 1000);
  const perSecond: Record<string, number[]> = { tree: [], [commit]: [] };
  for (let round = 0; round < 2 + BURSTS; round++) {
    for (const name of orderOf(names, round)) {
      const run = await burst(sides[name]!.fresh, { calls: BURST_CALLS, concurrency: CONCURRENCY });
      if (round >= 2) perSecond[name]!.push(run.perSecond);
    }
  }
  const ratios = perSecond.tree!.map((rate, i) => rate / perSecond[commit]![i]!);
  const ms = (name: string) => median(times[name]!).toFixed(3);
  console.log(`fresh key in process, PostgreSQL: this tree against ${commit}`);
  console.log(
    `  concurrency 1, ${PAIRS} pairs: ${ms('tree')} against ${ms(commit)} ms, ${(median(times.tree!) / median(times[commit]!)).toFixed(3)}× the time; pairs differ by ${median(differences).toFixed(1)} µs (median)`,
  );
  console.log(
    `  concurrency ${CONCURRENCY}, ${BURSTS} bursts of ${BURST_CALLS} each: ${median(perSecond.tree!).toFixed(0)} against ${median(perSecond[commit]!).toFixed(0)} calls/s, ${median(ratios).toFixed(3)}× the calls (median of the pairs)`,
  );
  console.log(
    `npm run bench:versus -- ${revision}, ${new Date().toISOString()}, node ${process.version}, load average ${loadAtStart.toFixed(1)} → ${os.loadavg()[0]!.toFixed(1)}, ${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
} finally {
  for (const side of Object.values(sides)) await side.close();
  rmSync(root, { recursive: true, force: true });
}
