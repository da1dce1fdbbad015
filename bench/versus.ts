// This working tree's fresh key against another commit's, side by side in one process on PostgreSQL:
// each side has its own copy of the library (the commit's `src` is extracted into `.tmp/versus/`), its
// own client and store, and runs the same mutation. Concurrency 1 alternates the two call by call
// (the ratio of their median times, and the median of each pair's difference); concurrency 32
// alternates bursts (the median of each pair's ratio). With the commit the tree is at (and no change),
// the two sides run the same code: what that prints is the harness's own noise.
//
//   npm run bench:versus -- <commit> [postgresql url]
//   (default: a database of its own, idempotent_mutations_profile)
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { PrismaClient } from '../generated/postgresql/client.js';
import type * as Core from '../src/index.js';
import type * as Prisma from '../src/prisma/index.js';
import { insertPayment, type PaymentInput } from './apps.js';
import { prepareDatabase } from './databases.js';
import { burst, interleave, median, orderOf } from './stats.js';
import { commitSource, comparedTimes } from './versus-source.js';

const [revision, url = 'postgresql://postgres@127.0.0.1:5432/idempotent_mutations_profile'] =
  process.argv.slice(2);
if (!revision) throw new Error('usage: npm run bench:versus -- <commit> [postgresql url]');
const PAIRS = 2_000;
const WARMUP = 200;
const BURSTS = 30;
const BURST_CALLS = 400;
const CONCURRENCY = 32;

const { commit, src, remove } = commitSource(revision, 'versus');

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
const sides = { tree: await sideOf(path.resolve('src')), [commit]: await sideOf(src) };
const names = Object.keys(sides);
const loadAtStart = os.loadavg()[0]!;
const started = performance.now();
try {
  const times = await interleave(
    { tree: sides.tree.fresh, [commit]: sides[commit]!.fresh },
    { warmup: WARMUP, rounds: PAIRS },
  );
  const perSecond: Record<string, number[]> = { tree: [], [commit]: [] };
  for (let round = 0; round < 2 + BURSTS; round++) {
    for (const name of orderOf(names, round)) {
      const run = await burst(sides[name]!.fresh, { calls: BURST_CALLS, concurrency: CONCURRENCY });
      if (round >= 2) perSecond[name]!.push(run.perSecond);
    }
  }
  const ratios = perSecond.tree!.map((rate, i) => rate / perSecond[commit]![i]!);
  console.log(`fresh key in process, PostgreSQL: this tree against ${commit}`);
  console.log(`  concurrency 1, ${PAIRS} pairs: ${comparedTimes(times, commit)}`);
  console.log(
    `  concurrency ${CONCURRENCY}, ${BURSTS} bursts of ${BURST_CALLS} each: ${median(perSecond.tree!).toFixed(0)} against ${median(perSecond[commit]!).toFixed(0)} calls/s, ${median(ratios).toFixed(3)}× the calls (median of the pairs)`,
  );
  console.log(
    `npm run bench:versus -- ${revision}, ${new Date().toISOString()}, node ${process.version}, load average ${loadAtStart.toFixed(1)} → ${os.loadavg()[0]!.toFixed(1)}, ${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
} finally {
  for (const side of Object.values(sides)) await side.close();
  remove();
}
