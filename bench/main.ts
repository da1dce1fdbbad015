// What idempotency costs, measured side by side in one run, on SQLite, PostgreSQL and (when it can
// be reached) MariaDB, through a real tRPC server and real Yoga servers on loopback:
//
//   1. fresh-key overhead: the same createPayment with and without idempotency, at concurrency 1
//      and 32, against the floor (a bare `SELECT 1` through the same Prisma client);
//   2. replay latency against the plain mutation;
//   3. duplicate storm: 64 concurrent calls with one key, against one execution;
//   4. sweep: expired records deleted per second;
//   5. peers: @aws-lambda-powertools/idempotency and @node-idempotency/core (Redis) wrapping the
//      same handler behind the same tRPC server;
//   6. the OpenTelemetry observer with no SDK registered: fresh keys on the memory store with and
//      without it (bench/observer-overhead.ts; `npm run bench:observer` shows all its scenarios).
//
// Scenarios compared with each other run interleaved after a warm-up, so the machine's load
// drifts over all of them alike. Prints one table; writes bench/results/latest.json, latest.md
// and ratios.svg.
//
//   npm run bench                         the full run (under 5 minutes on 2 cores)
//   npm run bench -- --quick              a smoke run
//   npm run bench -- --only postgresql    some databases (sqlite, postgresql, mysql; comma-separated)
//   more: --postgres URL  --mysql URL  --sqlite URL  --redis URL  --out DIR  --skip-sweep  --verbose
//
// Server databases are databases of their own (default `idempotent_mutations_bench`, created when
// missing): the sweep deletes every expired record it finds.
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { Decimal } from '@prisma/client/runtime/client';
import { fingerprint, runIdempotent, superjsonSerializer } from 'idempotent-mutations';
import { prismaStore, sweepExpired } from 'idempotent-mutations/prisma';
import {
  type BenchServers,
  graphqlPayment,
  insertPayment,
  type PaymentInput,
  plainPayment,
  startServers,
  trpcClient,
} from './apps.js';
import { ratiosChart } from './chart.js';
import {
  type BenchDatabase,
  type BenchPrismaClient,
  benchDatabases,
  openClient,
  prepareDatabase,
} from './databases.js';
import { measureObserverOverhead } from './observer-overhead.js';
import { connectPeers, type Peers } from './peers.js';
import { burst, interleave, median, orderOf, p99, type Scenario } from './stats.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    postgres: { type: 'string' },
    mysql: { type: 'string' },
    sqlite: { type: 'string' },
    redis: { type: 'string', default: 'redis://127.0.0.1:6379' },
    out: { type: 'string', default: 'bench/results' },
    verbose: { type: 'boolean', default: false },
    'skip-sweep': { type: 'boolean', default: false },
  },
});

/** How much of everything a run does. */
const settings = args.quick
  ? {
      warmup: 5,
      rounds: 30,
      throughputWarmup: 1,
      throughputRounds: 1,
      throughputCalls: 64,
      storms: 3,
      sweepRecords: 5_000,
      microIterations: 2_000,
      observerRounds: 60,
    }
  : {
      warmup: 30,
      rounds: 300,
      throughputWarmup: 1,
      throughputRounds: 5,
      throughputCalls: 256,
      storms: 12,
      sweepRecords: 100_000,
      microIterations: 20_000,
      observerRounds: 400,
    };
const CONCURRENCY = 32;
const STORM = 64;
const command = `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;
const input: PaymentInput = { amount: '9.99', currency: 'EUR' };

const progress = (line: string) => process.stderr.write(`${line}\n`);

// ---------------------------------------------------------------------------------------------
// The calls
// ---------------------------------------------------------------------------------------------

/** Every way the benchmark calls createPayment, against one client and its servers. */
function callsOf(prisma: BenchPrismaClient, servers: BenchServers, user: string) {
  const store = prismaStore(prisma);
  const last: { replayed?: string | null } = {};
  const trpc = trpcClient(servers.trpcUrl, (headers) => {
    last.replayed = headers.get('idempotent-replayed');
  });
  const storeCall = (key: string) =>
    runIdempotent({ store, scope: user, key, operation: 'createPayment', input }, (tx) =>
      insertPayment(tx as Parameters<typeof insertPayment>[0], user, input),
    );
  const calls = {
    select1: () => prisma.$queryRawUnsafe('SELECT 1'),
    storePlain: () => plainPayment(prisma, user, input),
    store: storeCall,
    trpcEcho: () => trpc.echo.mutate(input, { context: { userId: user } }),
    trpcPlain: (userId = user) => trpc.plain.mutate(input, { context: { userId } }),
    trpc: (key: string, userId = user) => trpc.idempotent.mutate(input, { context: { userId, key } }),
    trpcCached: (key: string) => trpc.idempotentCached.mutate(input, { context: { userId: user, key } }),
    yogaEcho: () => graphqlPayment(servers.yogaPlainUrl, { userId: user }, input, 'echoPayment'),
    yogaPlain: (userId = user) => graphqlPayment(servers.yogaPlainUrl, { userId }, input),
    yoga: (key: string, userId = user) => graphqlPayment(servers.yogaIdempotentUrl, { userId, key }, input),
    powertools: (key: string) => trpc.powertools.mutate(input, { context: { userId: user, key } }),
    nodeIdempotency: (key: string) => trpc.nodeIdempotency.mutate(input, { context: { userId: user, key } }),
  };
  return { calls, last };
}

type Calls = ReturnType<typeof callsOf>['calls'];
const freshKey = () => randomUUID();

/** The concurrency-1 scenarios, by name; replays use keys primed by `primeReplays`. */
function latencyScenarios(calls: Calls, withPeers: boolean): Record<string, Scenario> {
  return {
    select1: calls.select1,
    'store.plain': calls.storePlain,
    'store.fresh': () => calls.store(freshKey()),
    'store.replay': () => calls.store('replay-store'),
    'trpc.echo': calls.trpcEcho,
    'trpc.plain': () => calls.trpcPlain(),
    'trpc.fresh': () => calls.trpc(freshKey()),
    'trpc.replay': () => calls.trpc('replay-trpc'),
    'trpc.replayCached': () => calls.trpcCached('replay-trpcCached'),
    'yoga.echo': calls.yogaEcho,
    'yoga.plain': () => calls.yogaPlain(),
    'yoga.fresh': () => calls.yoga(freshKey()),
    'yoga.replay': () => calls.yoga('replay-yoga'),
    ...(withPeers
      ? {
          'powertools.fresh': () => calls.powertools(freshKey()),
          'powertools.replay': () => calls.powertools('replay-powertools'),
          'nodeIdempotency.fresh': () => calls.nodeIdempotency(freshKey()),
          'nodeIdempotency.replay': () => calls.nodeIdempotency('replay-nodeIdempotency'),
        }
      : {}),
  };
}

async function primeReplays(calls: Calls, withPeers: boolean): Promise<void> {
  await calls.store('replay-store');
  await calls.trpc('replay-trpc');
  await calls.trpcCached('replay-trpcCached');
  await calls.yoga('replay-yoga');
  if (withPeers)
    await Promise.all([
      calls.powertools('replay-powertools'),
      calls.nodeIdempotency('replay-nodeIdempotency'),
    ]);
}

// ---------------------------------------------------------------------------------------------
// The measurements
// ---------------------------------------------------------------------------------------------

/** A latency distribution, ms. */
interface Latency {
  median: number;
  p99: number;
  samples: number;
}

const latencyOf = (samples: number[]): Latency => ({
  median: median(samples),
  p99: p99(samples),
  samples: samples.length,
});

/** What one call sends to the database, from Prisma's query log. */
interface Statements {
  /** Statements Prisma logged (it does not log BEGIN). */
  logged: number;
  /** Round trips: the logged statements plus one BEGIN per transaction. */
  roundTrips: number;
  sql: string[];
}

/**
 * Counts the statements of one call of each scenario, on a logging client of its own (so the log
 * costs the timed runs nothing), and checks that replays replay and fresh calls do not.
 */
async function profile(db: BenchDatabase, peers: Peers | undefined, user: string) {
  const sql: string[] = [];
  const prisma = await openClient(db.url, (event) => sql.push(event.query));
  const servers = await startServers(prisma, peers ?? noPeers);
  try {
    const { calls, last } = callsOf(prisma, servers, user);
    await primeReplays(calls, peers !== undefined);
    const statements: Record<string, Statements> = {};
    for (const [name, scenario] of Object.entries(latencyScenarios(calls, peers !== undefined))) {
      await scenario(); // the first call of a kind may prepare things
      sql.length = 0;
      const answer = await scenario();
      const ends = sql.filter((q) => /\b(COMMIT|ROLLBACK)\b/.test(q)).length;
      statements[name] = { logged: sql.length, roundTrips: sql.length + ends, sql: [...sql] };
      const replayed = /^trpc\.(fresh|replay)/.test(name)
        ? last.replayed === 'true'
        : /^yoga\.(fresh|replay)/.test(name)
          ? (answer as { replayed?: boolean }).replayed === true
          : undefined;
      if (replayed !== undefined && replayed !== name.includes('.replay')) {
        throw new Error(`${db.name}: ${name} was ${replayed ? '' : 'not '}answered as a replay`);
      }
      if (name === 'trpc.replayCached' && sql.length !== 0) {
        throw new Error(`${db.name}: a replay from the local cache sent ${sql.length} statements`);
      }
      if (args.verbose) progress(`  ${name}: ${sql.length} statements\n    ${sql.join('\n    ')}`);
    }
    return statements;
  } finally {
    await servers.close();
    await prisma.$disconnect();
  }
}

/** Throughput at concurrency 32, plain against fresh, bursts interleaved. */
async function throughput(calls: Calls) {
  const scenarios: Record<string, (i: number) => Promise<unknown>> = {
    'trpc.plain': () => calls.trpcPlain(),
    'trpc.fresh': () => calls.trpc(freshKey()),
    'yoga.plain': () => calls.yogaPlain(),
    'yoga.fresh': () => calls.yoga(freshKey()),
  };
  const names = Object.keys(scenarios);
  const perSecond: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  const latencies: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  const { throughputWarmup, throughputRounds, throughputCalls } = settings;
  for (let round = 0; round < throughputWarmup + throughputRounds; round++) {
    for (const name of orderOf(names, round)) {
      const result = await burst(scenarios[name]!, { calls: throughputCalls, concurrency: CONCURRENCY });
      if (round < throughputWarmup) continue;
      perSecond[name]!.push(result.perSecond);
      latencies[name]!.push(...result.latencies);
    }
  }
  return Object.fromEntries(
    names.map((name) => [
      name,
      { perSecond: median(perSecond[name]!), bursts: perSecond[name]!, latency: latencyOf(latencies[name]!) },
    ]),
  );
}

/**
 * 64 concurrent calls with one new key, against one call with a new key (one execution) and
 * against 64 concurrent replays of a completed key (what answering 64 requests costs at least).
 * Each storm has a user of its own, so its executions are counted as payment rows.
 */
async function storm(prisma: BenchPrismaClient, calls: Calls, transport: 'trpc' | 'yoga', user: string) {
  const call = transport === 'trpc' ? calls.trpc : calls.yoga;
  const idOf = (answer: unknown) =>
    transport === 'trpc' ? (answer as { id: number }).id : (answer as { payment: { id: number } }).payment.id;
  const times: Record<'storm' | 'single' | 'replays', number[]> = { storm: [], single: [], replays: [] };
  const executions: number[] = [];
  const answersDiffer: number[] = [];
  const timed = async (run: () => Promise<unknown>) => {
    const started = performance.now();
    const result = await run();
    return { ms: performance.now() - started, result };
  };
  for (let rep = 0; rep < 1 + settings.storms; rep++) {
    const record = rep > 0;
    for (const kind of orderOf(['storm', 'single', 'replays'] as const, rep)) {
      // Each starts on a quiet server, not in the wake of the 64 calls before it.
      await new Promise((resolve) => setTimeout(resolve, 25));
      if (kind === 'single') {
        const { ms } = await timed(() => call(freshKey()));
        if (record) times.single.push(ms);
      } else if (kind === 'replays') {
        const { ms } = await timed(() =>
          Promise.all(Array.from({ length: STORM }, () => call(`replay-${transport}`))),
        );
        if (record) times.replays.push(ms);
      } else {
        const stormUser = `${user}-storm-${transport}-${rep}`;
        const key = freshKey();
        const { ms, result } = await timed(() =>
          Promise.all(Array.from({ length: STORM }, () => call(key, stormUser))),
        );
        const count = await prisma.payment.count({ where: { userId: stormUser } });
        const ids = new Set((result as unknown[]).map(idOf));
        executions.push(count);
        answersDiffer.push(ids.size);
        if (record) times.storm.push(ms);
      }
    }
  }
  return {
    storm: latencyOf(times.storm),
    single: latencyOf(times.single),
    replays: latencyOf(times.replays),
    /** Payments written by each storm (warm-up included): 1 means exactly once. */
    executions,
    /** Distinct payment ids answered by each storm: 1 means everybody got the same payment. */
    distinctAnswers: answersDiffer,
  };
}

/** Inserts expired records and times `sweepExpired` deleting them. */
async function sweep(prisma: BenchPrismaClient, user: string) {
  const scope = `${user}-sweep`;
  const expired = new Date(Date.now() - 3_600_000);
  const result = storedPayment();
  for (let start = 0; start < settings.sweepRecords; start += 2_000) {
    const count = Math.min(2_000, settings.sweepRecords - start);
    await prisma.idempotencyRecord.createMany({
      data: Array.from({ length: count }, (_, i) => ({
        scope,
        key: `expired-${start + i}`,
        operation: 'createPayment',
        fingerprint: 'f'.repeat(64),
        status: 'COMPLETED',
        result,
        createdAt: expired,
        completedAt: expired,
        expiresAt: expired,
      })),
    });
  }
  const started = performance.now();
  const deleted = await sweepExpired(prisma);
  const ms = performance.now() - started;
  const left = await prisma.idempotencyRecord.count({ where: { scope } });
  return {
    available: true as const,
    records: settings.sweepRecords,
    deleted,
    left,
    ms,
    perSecond: (deleted / ms) * 1000,
  };
}

/** The Prisma store's default serializer, and a payment as it stores one. */
const serializer = superjsonSerializer({ Decimal });
const payment = {
  id: 1,
  userId: 'bench-00000000-0000-0000-0000-000000000000',
  amount: new Decimal('9.99'),
  currency: 'EUR',
  createdAt: new Date(),
};
const storedPayment = () => serializer.serialize(payment);

/** What the core spends in process per call: the fingerprint, and serializing the stored result. */
function cpuCosts() {
  const text = storedPayment();
  const perCall = (run: () => unknown) => {
    for (let i = 0; i < 1_000; i++) run();
    const started = performance.now();
    for (let i = 0; i < settings.microIterations; i++) run();
    return ((performance.now() - started) / settings.microIterations) * 1000;
  };
  return {
    fingerprintUs: perCall(() => fingerprint('createPayment', input)),
    serializeUs: perCall(() => serializer.serialize(payment)),
    deserializeUs: perCall(() => serializer.deserialize(text)),
    resultBytes: Buffer.byteLength(text),
  };
}

const noPeers: Peers = {
  powertools: (handler) => handler,
  nodeIdempotency: (handler) => handler,
  close: async () => undefined,
};

/** Everything measured on one database. */
async function measure(db: BenchDatabase, peers: Peers | undefined) {
  const user = `bench-${randomUUID()}`;
  const statements = await profile(db, peers, `${user}-profile`);
  const prisma = await openClient(db.url);
  const servers = await startServers(prisma, peers ?? noPeers);
  try {
    const { calls } = callsOf(prisma, servers, user);
    await primeReplays(calls, peers !== undefined);
    let started = performance.now();
    const samples = await interleave(latencyScenarios(calls, peers !== undefined), settings);
    const latency = Object.fromEntries(Object.entries(samples).map(([name, s]) => [name, latencyOf(s)]));
    progress(`  concurrency 1: ${((performance.now() - started) / 1000).toFixed(1)} s`);
    started = performance.now();
    const concurrent = await throughput(calls);
    progress(`  concurrency ${CONCURRENCY}: ${((performance.now() - started) / 1000).toFixed(1)} s`);
    started = performance.now();
    const storms = {
      trpc: await storm(prisma, calls, 'trpc', user),
      yoga: await storm(prisma, calls, 'yoga', user),
    };
    progress(`  storms: ${((performance.now() - started) / 1000).toFixed(1)} s`);
    started = performance.now();
    const swept = args['skip-sweep'] ? undefined : await sweep(prisma, user);
    progress(`  sweep: ${((performance.now() - started) / 1000).toFixed(1)} s`);
    return { name: db.name, latency, statements, throughput: concurrent, storms, sweep: swept };
  } finally {
    await servers.close();
    await prisma.payment.deleteMany({ where: { userId: { startsWith: user } } });
    await prisma.idempotencyRecord.deleteMany({ where: { scope: { startsWith: user } } });
    await prisma.$disconnect();
  }
}

type Measured = Awaited<ReturnType<typeof measure>>;

// ---------------------------------------------------------------------------------------------
// Ratios, targets and the report
// ---------------------------------------------------------------------------------------------

/** The ratios the issue asks for, from one database's measurements. */
function ratiosOf(m: Measured) {
  const ms = (name: string) => m.latency[name]?.median;
  const floor = ms('select1')!;
  const overhead = (t: string) => {
    const extra = ms(`${t}.fresh`)! - ms(`${t}.plain`)!;
    return { ms: extra, roundTrips: extra / floor, ratio: ms(`${t}.fresh`)! / ms(`${t}.plain`)! };
  };
  const per = (t: 'trpc' | 'yoga') => ({
    overhead: overhead(t),
    replay: ms(`${t}.replay`)! / ms(`${t}.plain`)!,
    throughput: m.throughput[`${t}.fresh`]!.perSecond / m.throughput[`${t}.plain`]!.perSecond,
    storm: m.storms[t].storm.median / m.storms[t].single.median,
    /** The storm against 64 replays at once: what the duplicates cost beyond answering 64 calls. */
    stormVsReplays: m.storms[t].storm.median / m.storms[t].replays.median,
    stormFloor: m.storms[t].replays.median / m.storms[t].single.median,
    stormExecutions: Math.max(...m.storms[t].executions),
  });
  const peer = (name: string) =>
    ms(`${name}.replay`) === undefined
      ? undefined
      : {
          fresh: ms(`${name}.fresh`)! / ms('trpc.fresh')!,
          replay: ms(`${name}.replay`)! / ms('trpc.replay')!,
          replayCached: ms(`${name}.replay`)! / ms('trpc.replayCached')!,
        };
  return {
    floorMs: floor,
    /** What HTTP and the framework cost without the database, as a share of the plain mutation. */
    httpFloor: { trpc: ms('trpc.echo')! / ms('trpc.plain')!, yoga: ms('yoga.echo')! / ms('yoga.plain')! },
    store: { overhead: overhead('store'), replay: ms('store.replay')! / ms('store.plain')! },
    trpc: { ...per('trpc'), replayCached: ms('trpc.replayCached')! / ms('trpc.plain')! },
    yoga: per('yoga'),
    /** Peer ÷ ours (tRPC): above 1, we are faster. */
    peers: { powertools: peer('powertools'), nodeIdempotency: peer('nodeIdempotency') },
  };
}

interface Target {
  database: string;
  target: string;
  value: string;
  met: boolean;
}

function targetsOf(m: Measured, r: ReturnType<typeof ratiosOf>): Target[] {
  const targets: Target[] = [];
  const add = (target: string, value: string, met: boolean) =>
    targets.push({ database: m.name, target, value, met });
  for (const t of ['trpc', 'yoga'] as const) {
    const label = t === 'trpc' ? 'tRPC' : 'Yoga';
    const x = r[t];
    add(
      `${label}: fresh-key overhead ≤ 2 SELECT 1 round trips (c=1)`,
      `${x.overhead.roundTrips.toFixed(1)}`,
      x.overhead.roundTrips <= 2,
    );
    add(
      `${label}: throughput at c=${CONCURRENCY} ≥ 0.75× plain`,
      `${x.throughput.toFixed(2)}×`,
      x.throughput >= 0.75,
    );
    add(`${label}: replay median ≤ 0.6× plain`, `${x.replay.toFixed(2)}×`, x.replay <= 0.6);
    add(
      `${label}: ${STORM} duplicates answered ≤ 1.5× one execution, executed once`,
      `${x.storm.toFixed(2)}×, ${x.stormExecutions} execution(s)`,
      x.storm <= 1.5 && x.stormExecutions === 1,
    );
  }
  for (const [name, label] of [
    ['powertools', 'Powertools'],
    ['nodeIdempotency', 'node-idempotency'],
  ] as const) {
    const peer = r.peers[name];
    if (peer)
      add(`replay faster than ${label}`, `theirs ÷ ours = ${peer.replay.toFixed(2)}×`, peer.replay > 1);
  }
  return targets;
}

const LABELS: Record<string, string> = {
  select1: 'SELECT 1 (the floor)',
  'store.plain': 'store, in process: plain',
  'store.fresh': 'store, in process: fresh key',
  'store.replay': 'store, in process: replay',
  'trpc.echo': 'tRPC: no database (HTTP floor)',
  'trpc.plain': 'tRPC: plain',
  'trpc.fresh': 'tRPC: fresh key',
  'trpc.replay': 'tRPC: replay',
  'trpc.replayCached': 'tRPC: replay, localCache',
  'yoga.echo': 'Yoga: no database (HTTP floor)',
  'yoga.plain': 'Yoga: plain',
  'yoga.fresh': 'Yoga: fresh key',
  'yoga.replay': 'Yoga: replay',
  'powertools.fresh': 'Powertools (Redis): fresh key',
  'powertools.replay': 'Powertools (Redis): replay',
  'nodeIdempotency.fresh': 'node-idempotency (Redis): fresh key',
  'nodeIdempotency.replay': 'node-idempotency (Redis): replay',
};

const fmtMs = (value: number) => `${value < 10 ? value.toFixed(2) : value.toFixed(1)} ms`;
const fmtX = (value: number) => `${value.toFixed(2)}×`;
const check = (met: boolean) => (met ? 'yes' : 'NO');

/** The rows of the one table: database, scenario, median, p99, statements, ratio, target, met. */
function tableRows(m: Measured, r: ReturnType<typeof ratiosOf>): string[][] {
  const rows: string[][] = [];
  const row = (...cells: string[]) => rows.push([m.name, ...cells]);
  const rt = (name: string) => {
    const s = m.statements[name];
    return s ? `${s.logged} / ${s.roundTrips}` : '';
  };
  const lat = (name: string, ratio = '', target = '', met = '') => {
    const l = m.latency[name];
    if (l) row(LABELS[name]!, fmtMs(l.median), fmtMs(l.p99), rt(name), ratio, target, met);
  };
  lat('select1');
  for (const t of ['store', 'trpc', 'yoga'] as const) {
    const x = t === 'store' ? r.store : r[t];
    lat(`${t}.echo`);
    lat(`${t}.plain`);
    const o = x.overhead;
    const overhead = `${fmtX(o.ratio)} plain; +${fmtMs(o.ms)} = ${o.roundTrips.toFixed(1)} RT`;
    if (t === 'store') lat(`${t}.fresh`, overhead);
    else lat(`${t}.fresh`, overhead, '≤ 2 RT', check(o.roundTrips <= 2));
    if (t === 'store') lat(`${t}.replay`, `${fmtX(x.replay)} plain`);
    else lat(`${t}.replay`, `${fmtX(x.replay)} plain`, '≤ 0.6×', check(x.replay <= 0.6));
    if (t === 'trpc') lat('trpc.replayCached', `${fmtX(r.trpc.replayCached)} plain`);
  }
  for (const t of ['trpc', 'yoga'] as const) {
    const label = t === 'trpc' ? 'tRPC' : 'Yoga';
    const plain = m.throughput[`${t}.plain`]!;
    const fresh = m.throughput[`${t}.fresh`]!;
    row(
      `${label}: plain, c=${CONCURRENCY}`,
      `${plain.perSecond.toFixed(0)}/s`,
      fmtMs(plain.latency.p99),
      '',
      '',
      '',
      '',
    );
    const ratio = r[t].throughput;
    row(
      `${label}: fresh key, c=${CONCURRENCY}`,
      `${fresh.perSecond.toFixed(0)}/s`,
      fmtMs(fresh.latency.p99),
      '',
      `${fmtX(ratio)} plain`,
      '≥ 0.75×',
      check(ratio >= 0.75),
    );
  }
  for (const t of ['trpc', 'yoga'] as const) {
    const label = t === 'trpc' ? 'tRPC' : 'Yoga';
    const s = m.storms[t];
    row(`${label}: one execution (fresh key)`, fmtMs(s.single.median), fmtMs(s.single.p99), '', '', '', '');
    row(
      `${label}: ${STORM} duplicates, one key`,
      fmtMs(s.storm.median),
      fmtMs(s.storm.p99),
      '',
      `${fmtX(r[t].storm)} one execution, ${fmtX(r[t].stormVsReplays)} 64 replays; ran ${Math.max(...s.executions)}×`,
      '≤ 1.5×, once',
      check(r[t].storm <= 1.5 && r[t].stormExecutions === 1),
    );
    row(
      `${label}: ${STORM} replays at once (floor)`,
      fmtMs(s.replays.median),
      fmtMs(s.replays.p99),
      '',
      `${fmtX(r[t].stormFloor)} one execution`,
      '',
      '',
    );
  }
  if (m.sweep) {
    row(
      `sweepExpired: ${m.sweep.records.toLocaleString('en')} expired`,
      fmtMs(m.sweep.ms),
      '',
      '',
      `${Math.round(m.sweep.perSecond).toLocaleString('en')} records/s (${m.sweep.left} left)`,
      '',
      '',
    );
  }
  for (const name of ['powertools', 'nodeIdempotency'] as const) {
    const peer = r.peers[name];
    if (!peer) continue;
    lat(`${name}.fresh`, `${fmtX(peer.fresh)} our tRPC fresh`);
    lat(
      `${name}.replay`,
      `${fmtX(peer.replay)} our tRPC replay; ${fmtX(peer.replayCached)} with localCache`,
      'ours faster',
      check(peer.replay > 1),
    );
  }
  return rows;
}

const HEADER = ['database', 'scenario', 'median', 'p99', 'SQL / RT', 'ratio', 'target', 'met'];

function textTable(rows: string[][]): string {
  const widths = HEADER.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(HEADER), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function markdownTable(rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
  return [line(HEADER), line(HEADER.map(() => '---')), ...rows.map(line)].join('\n');
}

function chartRows(results: { m: Measured; r: ReturnType<typeof ratiosOf> }[]) {
  const by = (pick: (r: ReturnType<typeof ratiosOf>) => number | undefined) =>
    Object.fromEntries(results.map(({ m, r }) => [m.name, pick(r)]));
  return [
    {
      label: 'Fresh-key overhead, in SELECT 1 round trips, tRPC',
      target: { value: 2, kind: 'max' as const },
      values: by((r) => r.trpc.overhead.roundTrips),
    },
    {
      label: 'Fresh-key overhead, in SELECT 1 round trips, Yoga',
      target: { value: 2, kind: 'max' as const },
      values: by((r) => r.yoga.overhead.roundTrips),
    },
    { label: 'Fresh key ÷ plain, latency, tRPC', values: by((r) => r.trpc.overhead.ratio) },
    { label: 'Fresh key ÷ plain, latency, Yoga', values: by((r) => r.yoga.overhead.ratio) },
    {
      label: `Fresh key ÷ plain, throughput at ${CONCURRENCY}, tRPC`,
      target: { value: 0.75, kind: 'min' as const },
      values: by((r) => r.trpc.throughput),
    },
    {
      label: `Fresh key ÷ plain, throughput at ${CONCURRENCY}, Yoga`,
      target: { value: 0.75, kind: 'min' as const },
      values: by((r) => r.yoga.throughput),
    },
    {
      label: 'Replay ÷ plain, latency, tRPC',
      target: { value: 0.6, kind: 'max' as const },
      values: by((r) => r.trpc.replay),
    },
    {
      label: 'Replay ÷ plain, latency, Yoga',
      target: { value: 0.6, kind: 'max' as const },
      values: by((r) => r.yoga.replay),
    },
    {
      label: `${STORM} duplicates ÷ one execution, tRPC`,
      target: { value: 1.5, kind: 'max' as const },
      values: by((r) => r.trpc.storm),
    },
    {
      label: `${STORM} duplicates ÷ one execution, Yoga`,
      target: { value: 1.5, kind: 'max' as const },
      values: by((r) => r.yoga.storm),
    },
    {
      label: `${STORM} duplicates ÷ ${STORM} replays at once, tRPC`,
      values: by((r) => r.trpc.stormVsReplays),
    },
    {
      label: `${STORM} duplicates ÷ ${STORM} replays at once, Yoga`,
      values: by((r) => r.yoga.stormVsReplays),
    },
    {
      label: 'Powertools replay ÷ ours (tRPC)',
      target: { value: 1, kind: 'min' as const },
      values: by((r) => r.peers.powertools?.replay),
    },
    {
      label: 'node-idempotency replay ÷ ours (tRPC)',
      target: { value: 1, kind: 'min' as const },
      values: by((r) => r.peers.nodeIdempotency?.replay),
    },
    {
      label: 'Powertools replay ÷ ours with localCache',
      target: { value: 1, kind: 'min' as const },
      values: by((r) => r.peers.powertools?.replayCached),
    },
    {
      label: 'node-idempotency replay ÷ ours with localCache',
      target: { value: 1, kind: 'min' as const },
      values: by((r) => r.peers.nodeIdempotency?.replayCached),
    },
  ];
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

const runStarted = performance.now();
const takenAt = new Date();
const loadAtStart = os.loadavg();
const only = args.only?.split(',').map((s) => s.trim().toLowerCase());
const selected = benchDatabases({ sqlite: args.sqlite, postgres: args.postgres, mysql: args.mysql }).filter(
  (db) => !only || only.some((name) => db.aliases.includes(name)),
);

const cpu = cpuCosts();
progress('OpenTelemetry observer, no SDK:');
const observer = await measureObserverOverhead({ rounds: settings.observerRounds, warmup: 30, calls: 200 });
const observerTarget = {
  database: 'memory store',
  target: 'OpenTelemetry observer without an SDK, fresh key ≤ 1.02×',
  value: `${observer['observed, no SDK'].ratio.toFixed(3)}× (A/A ${observer['unobserved (A/A)'].ratio.toFixed(3)}×)`,
  met: observer['observed, no SDK'].ratio <= 1.02,
};
let peers: Peers | undefined;
try {
  peers = await connectPeers(args.redis!, `bench-${randomUUID()}`);
} catch (error) {
  progress(`Redis at ${args.redis} cannot be reached (${(error as Error).message}): peers skipped`);
}

const results: { m: Measured; r: ReturnType<typeof ratiosOf> }[] = [];
const skipped: { name: string; reason: string }[] = [];
for (const db of selected) {
  try {
    await prepareDatabase(db);
  } catch (error) {
    const reason = (error as Error).message.split('\n').at(-1)!.trim();
    skipped.push({ name: db.name, reason });
    progress(`${db.name}: cannot be reached (${reason}), skipped`);
    continue;
  }
  progress(`${db.name}:`);
  const m = await measure(db, peers);
  results.push({ m, r: ratiosOf(m) });
}
await peers?.close();

const rows = results.flatMap(({ m, r }) => tableRows(m, r));
const targets = [...results.flatMap(({ m, r }) => targetsOf(m, r)), observerTarget];
const seconds = (performance.now() - runStarted) / 1000;
const machine = {
  node: process.version,
  platform: `${os.platform()} ${os.release()}`,
  cpus: os.cpus().length,
  cpuModel: os.cpus()[0]?.model ?? 'unknown',
  loadAverage: { start: loadAtStart, end: os.loadavg() },
};
const about =
  `${command} — ${takenAt.toISOString()}, ${machine.cpus} × ${machine.cpuModel}, node ${machine.node}, ` +
  `load average ${loadAtStart[0]!.toFixed(1)} → ${machine.loadAverage.end[0]!.toFixed(1)}, ${seconds.toFixed(0)} s`;

console.log(`\n${about}`);
console.log(
  `c=1: ${settings.rounds} interleaved rounds after ${settings.warmup} warm-up; c=${CONCURRENCY}: ${settings.throughputRounds} bursts of ${settings.throughputCalls} calls each; ` +
    `${settings.storms} storms. SQL / RT: statements Prisma logged / round trips (+1 BEGIN per transaction). RT in ratios: SELECT 1 medians.\n`,
);
console.log(textTable(rows));
for (const s of skipped) console.log(`${s.name}: skipped, cannot be reached (${s.reason})`);
console.log(
  `\nin process per call: fingerprint ${cpu.fingerprintUs.toFixed(1)} µs, serialize ${cpu.serializeUs.toFixed(1)} µs, ` +
    `deserialize ${cpu.deserializeUs.toFixed(1)} µs (${cpu.resultBytes}-byte result)`,
);
console.log(
  `OpenTelemetry observer, fresh keys on the memory store: no SDK ${observerTarget.value} of unobserved ` +
    `(${observer.unobserved.medianUs.toFixed(1)} µs a call); SDK recording ${observer['observed, SDK recording'].ratio.toFixed(2)}×`,
);
const missed = targets.filter((t) => !t.met);
console.log(`targets met: ${targets.length - missed.length} of ${targets.length}`);
for (const t of missed) console.log(`  missed on ${t.database}: ${t.target} (${t.value})`);

await mkdir(args.out!, { recursive: true });
const series = results.map(({ m }) => m.name);
await writeFile(
  `${args.out}/latest.json`,
  `${JSON.stringify(
    {
      command,
      takenAt: takenAt.toISOString(),
      seconds,
      machine,
      settings: { ...settings, concurrency: CONCURRENCY, storm: STORM },
      cpu,
      observer,
      databases: results.map(({ m, r }) => ({ ...m, ratios: r })),
      skipped,
      targets,
    },
    null,
    2,
  )}\n`,
);
await writeFile(
  `${args.out}/latest.md`,
  `\`${command}\` — ${about.slice(command.length + 3)}\n\n${markdownTable(rows)}\n`,
);
await writeFile(
  `${args.out}/ratios.svg`,
  ratiosChart(chartRows(results), {
    title: 'idempotent-mutations: what idempotency costs, as ratios',
    subtitle: `${command}, ${takenAt.toISOString().slice(0, 16).replace('T', ' ')} UTC, ${machine.cpus} cores, load ${loadAtStart[0]!.toFixed(1)}`,
    series,
  }),
);
progress(`wrote ${args.out}/latest.json, latest.md and ratios.svg (${seconds.toFixed(0)} s)`);
