// Where a fresh key's time goes, next to plain's, and a replay's next to Powertools' (Redis), in
// process on PostgreSQL: a CPU profile of each (node:inspector), its samples summed by where the code
// lives, per call. Waiting for the database (or Redis) shows as idle; the rest is this process's
// work. The floors the README's Benchmarks section names.
//
//   npm run bench:profile -- [url] [--redis URL]
//   (default: a database of its own, idempotent_mutations_profile; redis://127.0.0.1:6379, and
//   without it no Powertools column)
import { randomUUID } from 'node:crypto';
import { Session } from 'node:inspector/promises';
import { parseArgs } from 'node:util';
import { runIdempotent } from 'idempotent-mutations';
import { prismaStore } from 'idempotent-mutations/prisma';
import { insertPayment, type PaymentInput, plainPayment } from './apps.js';
import { type BenchDatabase, openClient, openReads, prepareDatabase } from './databases.js';
import { connectPeers, type Peers } from './peers.js';

const { positionals, values: args } = parseArgs({
  allowPositionals: true,
  options: { redis: { type: 'string', default: 'redis://127.0.0.1:6379' } },
});
const database: BenchDatabase = {
  name: 'PostgreSQL',
  url: positionals[0] ?? 'postgresql://postgres@127.0.0.1:5432/idempotent_mutations_profile',
  aliases: [],
};
const CALLS = 3_000;
await prepareDatabase(database);
const prisma = await openClient(database.url);
const reads = await openReads(database.url);
const store = prismaStore(prisma, { reads });
const user = `profile-${process.pid}`;
const input: PaymentInput = { amount: '9.99', currency: 'EUR' };
const pay = (key: string, firstAttempt: boolean) =>
  runIdempotent({ store, scope: user, key, operation: 'createPayment', input, firstAttempt }, (tx) =>
    insertPayment(tx as Parameters<typeof insertPayment>[0], user, input),
  );
const peers: Peers | undefined = await connectPeers(args.redis, `profile-${process.pid}`).catch(() => {
  console.error(`Redis at ${args.redis} cannot be reached: no Powertools column`);
  return undefined;
});
const powertools = peers?.powertools<PaymentInput, unknown>(({ userId, input }) =>
  plainPayment(prisma, userId, input),
);
await pay('replayed', false);
await powertools?.({ userId: user, key: 'replayed', input });

const paths: Record<string, () => Promise<unknown>> = {
  plain: () => plainPayment(prisma, user, input),
  'fresh key (first attempt)': () => pay(randomUUID(), true),
  replay: () => pay('replayed', false),
  ...(powertools ? { 'Powertools replay': () => powertools({ userId: user, key: 'replayed', input }) } : {}),
};

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a sampled function lives. */
function placeOf({ functionName, url }: ProfileNode['callFrame']): string {
  if (!url) {
    if (functionName === '(idle)') return 'idle: waiting for the database';
    if (functionName === '(garbage collector)') return 'garbage collection';
    return 'native (sockets, microtasks, …)';
  }
  if (url.includes('@prisma/client/runtime')) return "Prisma's client runtime (query compiler included)";
  if (/adapter-pg|\/pg\/|pg-protocol|pg-types|pg-pool/.test(url)) return 'pg and @prisma/adapter-pg';
  if (/@redis\/|@aws-lambda-powertools/.test(url)) return 'Powertools and @redis/client';
  // Built (`npm run bench:profile`) or the TypeScript (`--conditions=source`).
  if (url.includes('/dist/') || url.includes('/src/')) return 'idempotent-mutations';
  if (url.startsWith('node:')) return 'Node.js internals';
  return 'other';
}

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 100 });
const table: Record<string, Record<string, number>> = {};
for (const [name, run] of Object.entries(paths)) {
  for (let i = 0; i < 300; i++) await run(); // warm-up
  await session.post('Profiler.start');
  const started = performance.now();
  for (let i = 0; i < CALLS; i++) await run();
  const wall = performance.now() - started;
  const { profile } = (await session.post('Profiler.stop')) as { profile: Profile };
  const places = new Map(profile.nodes.map((node) => [node.id, placeOf(node.callFrame)]));
  const spent: Record<string, number> = {};
  profile.samples.forEach((id, i) => {
    const place = places.get(id)!;
    spent[place] = (spent[place] ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000 / CALLS;
  });
  table[name] = { 'wall time': wall / CALLS, ...spent };
}
session.disconnect();
await peers?.close();
await reads.dispose();
await prisma.$disconnect();

const names = Object.keys(paths);
const rows = [...new Set(names.flatMap((name) => Object.keys(table[name]!)))];
rows.sort((a, b) => (table[names[1]!]![b] ?? 0) - (table[names[1]!]![a] ?? 0));
const width = 52;
console.log(`ms per call, ${CALLS} calls each, PostgreSQL at ${database.url.replace(/\/\/[^@]*@/, '//')}`);
console.log(`${''.padEnd(width)}${[...names, 'fresh − plain'].map((n) => n.padStart(27)).join('')}`);
for (const row of rows) {
  const [plain, fresh, ...others] = names.map((name) => table[name]![row] ?? 0) as [
    number,
    number,
    ...number[],
  ];
  console.log(
    `${row.padEnd(width)}${[plain, fresh, ...others, fresh - plain].map((ms) => ms.toFixed(3).padStart(27)).join('')}`,
  );
}
