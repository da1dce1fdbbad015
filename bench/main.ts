// What idempotency costs, measured side by side in one run, on SQLite, PostgreSQL and (when it can
// be reached) MariaDB, through a real tRPC server and real Yoga servers on loopback:
//
//   1. fresh-key overhead: the same createPayment with and without idempotency, at concurrency 1
//      and 32 (bursts interleaved), against plain both in a Prisma interactive transaction and
//      without one, counted in statements inside a transaction (what a fresh key actually pays);
//   2. replay latency against the plain mutation (our store reads through a driver adapter of its
//      own, `reads`; in process also through the Prisma client, side by side);
//   3. duplicate storm: 64 concurrent calls with one key, against one execution;
//   4. sweep: expired records deleted per second, among a million live ones;
//   5. peers: @aws-lambda-powertools/idempotency and @node-idempotency/core (Redis) wrapping the
//      same handler behind the same tRPC server; caches compared alike (ours uncached with theirs
//      uncached, our `localCache` with Powertools' `useLocalCache`);
//   6. the OpenTelemetry observer with no SDK registered: fresh keys on the memory store with and
//      without it (bench/observer-overhead.ts; `npm run bench:observer` shows all its scenarios).
//
// Scenarios compared with each other run interleaved after a warm-up, so the machine's load
// drifts over all of them alike. Prints one table; writes bench/results/latest.json, latest.md
// and ratios.svg.
//
//   npm run bench                         the full run (about 10 minutes on 2 cores)
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
import { type AdapterForUrlOptions, prismaStore, sweepExpired } from 'idempotent-mutations/prisma';
import pg from 'pg';
import { storedText } from '#internal/core/call.js';
import {
  type BenchServers,
  floorPayment,
  graphqlPayment,
  insertPayment,
  type PaymentInput,
  plainPayment,
  plainPaymentAndSelect,
  startServers,
  trpcClient,
} from './apps.js';
import { ratiosChart } from './chart.js';
import {
  type BenchDatabase,
  type BenchPrismaClient,
  type BenchReads,
  benchDatabases,
  openClient,
  openReads,
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
      throughputRounds: 3,
      throughputCalls: 64,
      storms: 3,
      sweepRecords: 5_000,
      sweepLiveRecords: 20_000,
      microIterations: 2_000,
      observerRounds: 60,
    }
  : {
      warmup: 30,
      rounds: 300,
      throughputWarmup: 1,
      throughputRounds: 20,
      throughputCalls: 160,
      storms: 12,
      sweepRecords: 100_000,
      sweepLiveRecords: 1_000_000,
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
function callsOf(prisma: BenchPrismaClient, servers: BenchServers, user: string, reads: BenchReads) {
  const store = prismaStore(prisma, { reads });
  const clientReadsStore = prismaStore(prisma);
  const last: { replayed?: string | null } = {};
  const trpc = trpcClient(servers.trpcUrl, (headers) => {
    last.replayed = headers.get('idempotent-replayed');
  });
  const storeCall = (key: string, firstAttempt = false, through = store) =>
    runIdempotent(
      { store: through, scope: user, key, operation: 'createPayment', input, firstAttempt },
      (tx) => insertPayment(tx as Parameters<typeof insertPayment>[0], user, input),
    );
  const calls = {
    select1: () => prisma.$queryRawUnsafe('SELECT 1'),
    storePlain: () => plainPayment(prisma, user, input),
    storePlainNoTx: () => insertPayment(prisma, user, input),
    storePlainAndSelect: () => plainPaymentAndSelect(prisma, user, input),
    storeFloor: () => floorPayment(prisma, user, freshKey(), input),
    store: storeCall,
    storeClientReads: (key: string) => storeCall(key, false, clientReadsStore),
    trpcEcho: () => trpc.echo.mutate(input, { context: { userId: user } }),
    trpcPlain: (userId = user) => trpc.plain.mutate(input, { context: { userId } }),
    trpcPlainNoTx: () => trpc.plainNoTx.mutate(input, { context: { userId: user } }),
    trpcFloor: () => trpc.floor.mutate(input, { context: { userId: user, key: freshKey() } }),
    trpcFloorReplay: (key: string) => trpc.floorReplay.mutate(input, { context: { userId: user, key } }),
    trpc: (key: string, userId = user, attempt?: number) =>
      trpc.idempotent.mutate(input, { context: { userId, key, attempt } }),
    trpcCached: (key: string, attempt?: number) =>
      trpc.idempotentCached.mutate(input, { context: { userId: user, key, attempt } }),
    yogaEcho: () => graphqlPayment(servers.yogaPlainUrl, { userId: user }, input, 'echoPayment'),
    yogaPlain: (userId = user) => graphqlPayment(servers.yogaPlainUrl, { userId }, input),
    yogaFloor: () =>
      graphqlPayment(servers.yogaPlainUrl, { userId: user, key: freshKey() }, input, 'createPaymentFloor'),
    yoga: (key: string, userId = user, attempt?: number) =>
      graphqlPayment(servers.yogaIdempotentUrl, { userId, key, attempt }, input),
    powertools: (key: string) => trpc.powertools.mutate(input, { context: { userId: user, key } }),
    powertoolsCached: (key: string) =>
      trpc.powertoolsCached.mutate(input, { context: { userId: user, key } }),
    nodeIdempotency: (key: string) => trpc.nodeIdempotency.mutate(input, { context: { userId: user, key } }),
  };
  return { calls, last };
}

type Calls = ReturnType<typeof callsOf>['calls'];
const freshKey = () => randomUUID();
/**
 * The `Idempotency-Attempt` the shipped clients send: 1 with a key they just made (the server then
 * claims without reading first), 2 on a retry. The storms send none, as a client that does not count.
 */
const FIRST = 1;
const RETRY = 2;

/** The concurrency-1 scenarios, by name; replays use keys primed by `primeReplays`. */
function latencyScenarios(calls: Calls, withPeers: boolean): Record<string, Scenario> {
  return {
    select1: calls.select1,
    'store.plainNoTx': calls.storePlainNoTx,
    'store.plain': calls.storePlain,
    'store.plainAndSelect': calls.storePlainAndSelect,
    'store.floor': calls.storeFloor,
    'store.fresh': () => calls.store(freshKey(), true),
    'store.replay': () => calls.store('replay-store'),
    'store.replayClientReads': () => calls.storeClientReads('replay-store'),
    'trpc.echo': calls.trpcEcho,
    'trpc.plainNoTx': () => calls.trpcPlainNoTx(),
    'trpc.plain': () => calls.trpcPlain(),
    'trpc.floor': calls.trpcFloor,
    'trpc.fresh': () => calls.trpc(freshKey(), undefined, FIRST),
    'trpc.replay': () => calls.trpc('replay-trpc', undefined, RETRY),
    'trpc.replayCached': () => calls.trpcCached('replay-trpcCached', RETRY),
    'trpc.floorReplay': () => calls.trpcFloorReplay('replay-trpc'),
    'yoga.echo': calls.yogaEcho,
    'yoga.plain': () => calls.yogaPlain(),
    'yoga.floor': calls.yogaFloor,
    'yoga.fresh': () => calls.yoga(freshKey(), undefined, FIRST),
    'yoga.replay': () => calls.yoga('replay-yoga', undefined, RETRY),
    ...(withPeers
      ? {
          'powertools.fresh': () => calls.powertools(freshKey()),
          'powertools.replay': () => calls.powertools('replay-powertools'),
          'powertools.replayCached': () => calls.powertoolsCached('replay-powertoolsCached'),
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
      calls.powertoolsCached('replay-powertoolsCached'),
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
  /** Statements sent, BEGIN included (Prisma's log leaves it out: one per COMMIT or ROLLBACK logged). */
  sent: number;
  /**
   * Round trips: on PostgreSQL, `adapterForUrl`'s pools send BEGIN with the transaction's first
   * statement (`lazyBegin`, where pg can pipeline), and the store (the floor too) sends a fresh key's
   * result with COMMIT (`completesWithCommit`; test/prisma/lazy-begin.test.ts counts them);
   * elsewhere BEGIN and the result take one of their own.
   */
  roundTrips: number;
  sql: string[];
}

/**
 * Counts the statements of one call of each scenario, on a logging client of its own (so the log
 * costs the timed runs nothing), and checks that replays replay and fresh calls do not.
 */
async function profile(db: BenchDatabase, peers: Peers | undefined, user: string) {
  const sql: string[] = [];
  const beginRides = db.name === 'PostgreSQL' && 'pipeline' in new pg.Client();
  const onQuery = (event: { query: string }) => sql.push(event.query);
  // Every statement through Prisma's query log: the store's own too (`directStatements: false`),
  // which send the same messages either way (test/prisma/statement-counts.test.ts).
  const prisma = await openClient(db.url, onQuery, { directStatements: false });
  const reads = await openReads(db.url, onQuery);
  const servers = await startServers(prisma, peers ?? noPeers, { reads });
  try {
    const { calls, last } = callsOf(prisma, servers, user, reads);
    await primeReplays(calls, peers !== undefined);
    const statements: Record<string, Statements> = {};
    for (const [name, scenario] of Object.entries(latencyScenarios(calls, peers !== undefined))) {
      await scenario(); // the first call of a kind may prepare things
      sql.length = 0;
      const answer = await scenario();
      const ends = sql.filter((q) => /\b(COMMIT|ROLLBACK)\b/.test(q)).length;
      // The log shows the result before its COMMIT: this client sends them through Prisma, one at a time.
      const resultsWithCommit = sql.filter(
        (q, i) => /^WITH done AS \(UPDATE/.test(q) && /^COMMIT\b/.test(sql[i + 1] ?? ''),
      ).length;
      statements[name] = {
        sent: sql.length + ends,
        roundTrips: sql.length + (beginRides ? -resultsWithCommit : ends),
        sql: [...sql],
      };
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
    await reads.dispose();
    await prisma.$disconnect();
  }
}

/** Throughput at concurrency 32, plain against fresh, bursts interleaved. */
async function throughput(calls: Calls) {
  const scenarios: Record<string, (i: number) => Promise<unknown>> = {
    'trpc.plain': () => calls.trpcPlain(),
    'trpc.floor': calls.trpcFloor,
    'trpc.fresh': () => calls.trpc(freshKey(), undefined, FIRST),
    'yoga.plain': () => calls.yogaPlain(),
    'yoga.floor': calls.yogaFloor,
    'yoga.fresh': () => calls.yoga(freshKey(), undefined, FIRST),
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

/**
 * Times `sweepExpired` on a table that also holds live records, as a real one does: the expired
 * records among a million live ones (settings). Both are written in bulk by one SQL statement,
 * and the live ones deleted afterwards (this is the bench's own database).
 */
async function sweep(prisma: BenchPrismaClient, db: BenchDatabase, user: string) {
  const live = `${user}-live`;
  const expired = `${user}-sweep`;
  const result = storedPayment();
  // PostgreSQL keeps the rows earlier runs deleted until a vacuum, and some servers (these tests'
  // among them) run without autovacuum: without one, each run swept a larger table than the last.
  const postgres = db.name === 'PostgreSQL';
  if (postgres) await prisma.$executeRawUnsafe('VACUUM idempotency_records');
  let started = performance.now();
  await bulkRecords(prisma, db, live, settings.sweepLiveRecords, result, 'live');
  await bulkRecords(prisma, db, expired, settings.sweepRecords, result, 'expired');
  if (postgres) await prisma.$executeRawUnsafe('ANALYZE idempotency_records'); // as autovacuum would
  progress(`  sweep: ${((performance.now() - started) / 1000).toFixed(1)} s to write the records`);
  started = performance.now();
  const deleted = await sweepExpired(prisma);
  const ms = performance.now() - started;
  const left = await prisma.idempotencyRecord.count({ where: { scope: expired } });
  const liveLeft = await prisma.idempotencyRecord.count({ where: { scope: live } });
  await prisma.idempotencyRecord.deleteMany({ where: { scope: live } });
  return {
    available: true as const,
    records: settings.sweepRecords,
    liveRecords: liveLeft,
    deleted,
    left,
    ms,
    perSecond: (deleted / ms) * 1000,
  };
}

/** Writes `count` completed records under `scope` in one statement, live for a day or expired an hour ago. */
async function bulkRecords(
  prisma: BenchPrismaClient,
  db: BenchDatabase,
  scope: string,
  count: number,
  result: string,
  state: 'live' | 'expired',
) {
  const columns =
    'scope, idempotency_key, operation, fingerprint, status, result, created_at, completed_at, expires_at';
  if (db.name === 'PostgreSQL') {
    const expires = state === 'live' ? "now() + interval '1 day'" : "now() - interval '1 hour'";
    await prisma.$executeRawUnsafe(
      `INSERT INTO idempotency_records (${columns}) SELECT $1, 'k-' || g, 'createPayment', repeat('f', 64), 'COMPLETED', $2, now() - interval '2 hours', now() - interval '2 hours', ${expires} FROM generate_series(1, $3::int) g`,
      scope,
      result,
      count,
    );
  } else if (db.name === 'MariaDB') {
    const expires = state === 'live' ? 'NOW(3) + INTERVAL 1 DAY' : 'NOW(3) - INTERVAL 1 HOUR';
    // MariaDB's Sequence engine: seq_1_to_N is a table of the numbers 1 to N.
    await prisma.$executeRawUnsafe(
      `INSERT INTO idempotency_records (${columns}) SELECT ?, CONCAT('k-', seq), 'createPayment', REPEAT('f', 64), 'COMPLETED', ?, NOW(3) - INTERVAL 2 HOUR, NOW(3) - INTERVAL 2 HOUR, ${expires} FROM seq_1_to_${Math.trunc(count)}`,
      scope,
      result,
    );
  } else {
    const expires = state === 'live' ? "'+1 day'" : "'-1 hour'";
    await prisma.$executeRawUnsafe(
      `INSERT INTO idempotency_records (${columns}) WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?) SELECT ?, 'k-' || n, 'createPayment', printf('%.64c', 'f'), 'COMPLETED', ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 hours'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 hours'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ${expires}) FROM g`,
      count,
      scope,
      result,
    );
  }
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
  // A 100 KB input and result: 800 line items, as plain JSON data from a validator.
  const items = Array.from({ length: 800 }, (_, i) => ({
    sku: `item-${i}`,
    name: `Line item number ${i}, with a description`,
    quantity: i % 7,
    price: i * 1.25,
    tags: ['a', 'b', 'c'],
    gift: i % 2 === 0,
  }));
  // Side by side: warmed up until compiled, then rounds in rotating order, median per call.
  const large = {
    fingerprint: () => fingerprint('createOrder', { items }),
    store: () => storedText(serializer, { items }, 1_048_576),
    stringify: () => JSON.stringify({ items }),
  };
  const largeIterations = Math.max(10, settings.microIterations / 500);
  const perRound: Record<keyof typeof large, number[]> = { fingerprint: [], store: [], stringify: [] };
  for (const run of Object.values(large)) for (let i = 0; i < 200; i++) run();
  for (let round = 0; round < 15; round++) {
    for (const name of orderOf(Object.keys(large) as (keyof typeof large)[], round)) {
      const started = performance.now();
      for (let i = 0; i < largeIterations; i++) large[name]();
      perRound[name].push((performance.now() - started) / largeIterations);
    }
  }
  return {
    fingerprintUs: perCall(() => fingerprint('createPayment', input)),
    serializeUs: perCall(() => serializer.serialize(payment)),
    deserializeUs: perCall(() => serializer.deserialize(text)),
    resultBytes: Buffer.byteLength(text),
    largeBytes: Buffer.byteLength(JSON.stringify({ items })),
    fingerprintLargeMs: median(perRound.fingerprint),
    storeLargeMs: median(perRound.store),
    stringifyLargeMs: median(perRound.stringify),
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
  const reads = await openReads(db.url);
  const servers = await startServers(prisma, peers ?? noPeers, { reads });
  const variants = [
    db.name === 'PostgreSQL'
      ? await variantScenarios(db, user, 'Unnamed', { preparedStatements: false })
      : undefined,
    await variantScenarios(db, user, 'ThroughClient', { directStatements: false }),
  ];
  try {
    const { calls } = callsOf(prisma, servers, user, reads);
    await primeReplays(calls, peers !== undefined);
    let started = performance.now();
    const samples = await interleave(
      Object.assign(latencyScenarios(calls, peers !== undefined), ...variants.map((v) => v?.scenarios)),
      settings,
    );
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
    const swept = args['skip-sweep'] ? undefined : await sweep(prisma, db, user);
    progress(`  sweep: ${((performance.now() - started) / 1000).toFixed(1)} s`);
    return { name: db.name, latency, statements, throughput: concurrent, storms, sweep: swept };
  } finally {
    await servers.close();
    await prisma.payment.deleteMany({ where: { userId: { startsWith: user } } });
    await prisma.idempotencyRecord.deleteMany({ where: { scope: { startsWith: user } } });
    await reads.dispose();
    await prisma.$disconnect();
    for (const variant of variants) await variant?.close();
  }
}

/**
 * A fresh key (and, with `replay`, a replay) in process through a client and `reads` whose adapters
 * `adapterForUrl` opened with `options`, next to the same calls through its defaults: PostgreSQL's
 * statements not prepared by name (`preparedStatements: false`), and the store's statements in a
 * transaction through the client (`directStatements: false`).
 */
async function variantScenarios(
  db: BenchDatabase,
  user: string,
  variant: 'Unnamed' | 'ThroughClient',
  options: AdapterForUrlOptions,
) {
  const prisma = await openClient(db.url, undefined, options);
  const reads = await openReads(db.url, undefined, options);
  const store = prismaStore(prisma, { reads });
  const call = (key: string, firstAttempt: boolean) =>
    runIdempotent({ store, scope: user, key, operation: 'createPayment', input, firstAttempt }, (tx) =>
      insertPayment(tx as Parameters<typeof insertPayment>[0], user, input),
    );
  const replayed = `replay-store-${variant}`;
  await call(replayed, false);
  return {
    scenarios: {
      [`store.fresh${variant}`]: () => call(freshKey(), true),
      ...(variant === 'Unnamed' ? { [`store.replay${variant}`]: () => call(replayed, false) } : {}),
    } satisfies Record<string, Scenario>,
    close: async () => {
      await reads.dispose();
      await prisma.$disconnect();
    },
  };
}

type Measured = Awaited<ReturnType<typeof measure>>;

// ---------------------------------------------------------------------------------------------
// Ratios, targets and the report
// ---------------------------------------------------------------------------------------------

/** The ratios the issue asks for, from one database's measurements. */
function ratiosOf(m: Measured) {
  const ms = (name: string) => m.latency[name]?.median;
  /** One more statement inside a Prisma interactive transaction: what a fresh key's extra statements cost. */
  const statement = ms('store.plainAndSelect')! - ms('store.plain')!;
  const overhead = (t: string) => {
    const extra = ms(`${t}.fresh`)! - ms(`${t}.plain`)!;
    return {
      ms: extra,
      statements: extra / statement,
      ratio: ms(`${t}.fresh`)! / ms(`${t}.plain`)!,
      /** The floor (plain and the two statements by hand, `floorPayment`) ÷ plain, and ours ÷ it. */
      floor: ms(`${t}.floor`)! / ms(`${t}.plain`)!,
      aboveFloor: ms(`${t}.fresh`)! / ms(`${t}.floor`)!,
    };
  };
  const per = (t: 'trpc' | 'yoga') => ({
    overhead: overhead(t),
    replay: ms(`${t}.replay`)! / ms(`${t}.plain`)!,
    throughput: m.throughput[`${t}.fresh`]!.perSecond / m.throughput[`${t}.plain`]!.perSecond,
    throughputFloor: m.throughput[`${t}.floor`]!.perSecond / m.throughput[`${t}.plain`]!.perSecond,
    storm: m.storms[t].storm.median / m.storms[t].single.median,
    /** The storm against 64 replays at once: what the duplicates cost beyond answering 64 calls. */
    stormVsReplays: m.storms[t].storm.median / m.storms[t].replays.median,
    stormFloor: m.storms[t].replays.median / m.storms[t].single.median,
    stormExecutions: Math.max(...m.storms[t].executions),
  });
  /** Ours ÷ theirs (tRPC, Redis on their side): below 1, we are faster. */
  const peer = (name: string) =>
    ms(`${name}.replay`) === undefined
      ? undefined
      : {
          fresh: ms('trpc.fresh')! / ms(`${name}.fresh`)!,
          replay: ms('trpc.replay')! / ms(`${name}.replay`)!,
          /** A replay's floor ÷ theirs: what no replay through the database can beat. */
          replayFloor: ms('trpc.floorReplay')! / ms(`${name}.replay`)!,
          replayCached: ms(`${name}.replayCached`)
            ? ms('trpc.replayCached')! / ms(`${name}.replayCached`)!
            : undefined,
        };
  return {
    statementMs: statement,
    /** What HTTP and the framework cost without the database, as a share of the plain mutation. */
    httpFloor: { trpc: ms('trpc.echo')! / ms('trpc.plain')!, yoga: ms('yoga.echo')! / ms('yoga.plain')! },
    /** The transaction's own cost: plain ÷ the same insert without one. */
    transaction: {
      store: ms('store.plain')! / ms('store.plainNoTx')!,
      trpc: ms('trpc.plain')! / ms('trpc.plainNoTx')!,
    },
    store: {
      overhead: overhead('store'),
      replay: ms('store.replay')! / ms('store.plain')!,
      /** The replay read through the store's `reads` adapter ÷ through the Prisma client. */
      readsVsClient: ms('store.replay')! / ms('store.replayClientReads')!,
      /** A fresh key with the store's statements in a transaction past the client ÷ through it. */
      direct: ms('store.fresh')! / ms('store.freshThroughClient')!,
      /** PostgreSQL: with the store's statements prepared by name ÷ without. */
      named: ms('store.freshUnnamed')
        ? {
            fresh: ms('store.fresh')! / ms('store.freshUnnamed')!,
            replay: ms('store.replay')! / ms('store.replayUnnamed')!,
          }
        : undefined,
    },
    trpc: {
      ...per('trpc'),
      freshVsNoTx: ms('trpc.fresh')! / ms('trpc.plainNoTx')!,
      replayCached: ms('trpc.replayCached')! / ms('trpc.plain')!,
      /** A replay's floor (`floorReplay`) ÷ plain, and ours ÷ it. */
      replayFloor: ms('trpc.floorReplay')! / ms('trpc.plain')!,
      replayAboveFloor: ms('trpc.replay')! / ms('trpc.floorReplay')!,
    },
    yoga: per('yoga'),
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
  /** `floor`: the same ratio for `floorPayment`, what no fresh key can beat. */
  const add = (
    target: string,
    value: number | undefined,
    limit: number,
    kind: 'max' | 'min',
    floor?: number,
  ) => {
    if (value === undefined) return;
    targets.push({
      database: m.name,
      target: `${target} ${kind === 'max' ? '≤' : '≥'} ${limit}×`,
      value: floor === undefined ? fmtX(value) : `${fmtX(value)} (floor ${fmtX(floor)})`,
      met: kind === 'max' ? value <= limit : value >= limit,
    });
  };
  add('fresh key ÷ plain, in process', r.store.overhead.ratio, 1.4, 'max', r.store.overhead.floor);
  for (const t of ['trpc', 'yoga'] as const) {
    const label = t === 'trpc' ? 'tRPC' : 'Yoga';
    add(`${label}: fresh key ÷ plain`, r[t].overhead.ratio, 1.25, 'max', r[t].overhead.floor);
    add(
      `${label}: throughput at c=${CONCURRENCY}, fresh ÷ plain (median of bursts)`,
      r[t].throughput,
      0.8,
      'min',
      r[t].throughputFloor,
    );
  }
  const { powertools, nodeIdempotency } = r.peers;
  add(
    'replay ÷ Powertools (Redis) replay, no cache',
    powertools?.replay,
    0.9,
    'max',
    powertools?.replayFloor,
  );
  add(
    'replay ÷ node-idempotency (Redis) replay, no cache',
    nodeIdempotency?.replay,
    0.9,
    'max',
    nodeIdempotency?.replayFloor,
  );
  add('replay with localCache ÷ Powertools with useLocalCache', r.peers.powertools?.replayCached, 0.8, 'max');
  return targets;
}

const LABELS: Record<string, string> = {
  select1: 'SELECT 1 through Prisma',
  'store.plainNoTx': 'store, in process: the insert alone, no transaction',
  'store.plain': 'store, in process: plain (the insert in a transaction)',
  'store.plainAndSelect': 'store, in process: plain + one SELECT 1 in its transaction',
  'store.floor': 'store, in process: the floor (plain + the claim and the result by hand)',
  'store.fresh': 'store, in process: fresh key',
  'store.replay': 'store, in process: replay (reads through the driver adapter)',
  'store.replayClientReads': 'store, in process: replay, reads through the Prisma client',
  'store.freshUnnamed': 'store, in process: fresh key, statements not prepared by name',
  'store.freshThroughClient': "store, in process: fresh key, the store's statements through the client",
  'store.replayUnnamed': 'store, in process: replay, statements not prepared by name',
  'trpc.echo': 'tRPC: no database (HTTP floor)',
  'trpc.plainNoTx': 'tRPC: the insert alone, no transaction',
  'trpc.plain': 'tRPC: plain (the insert in a transaction)',
  'trpc.floor': 'tRPC: the floor (plain + the claim and the result by hand)',
  'trpc.fresh': 'tRPC: fresh key',
  'trpc.replay': 'tRPC: replay',
  'trpc.replayCached': 'tRPC: replay, localCache',
  'trpc.floorReplay': "tRPC: a replay's floor (its read and its value read back, by hand)",
  'yoga.echo': 'Yoga: no database (HTTP floor)',
  'yoga.plain': 'Yoga: plain',
  'yoga.floor': 'Yoga: the floor (plain + the claim and the result by hand)',
  'yoga.fresh': 'Yoga: fresh key',
  'yoga.replay': 'Yoga: replay',
  'powertools.fresh': 'Powertools (Redis): fresh key',
  'powertools.replay': 'Powertools (Redis): replay',
  'powertools.replayCached': 'Powertools (Redis): replay, useLocalCache',
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
    return s ? `${s.sent} / ${s.roundTrips}` : '';
  };
  const lat = (name: string, ratio = '', target = '', met = '') => {
    const l = m.latency[name];
    if (l) row(LABELS[name]!, fmtMs(l.median), fmtMs(l.p99), rt(name), ratio, target, met);
  };
  lat('select1');
  const target = (value: number, limit: number, kind: 'max' | 'min') => [
    `${kind === 'max' ? '≤' : '≥'} ${limit}×`,
    check(kind === 'max' ? value <= limit : value >= limit),
  ];
  lat('store.plainNoTx');
  lat('store.plain', `${fmtX(r.transaction.store)} no transaction`);
  lat('store.plainAndSelect', `one statement in a transaction: ${fmtMs(r.statementMs)}`);
  for (const t of ['store', 'trpc', 'yoga'] as const) {
    const x = t === 'store' ? r.store : r[t];
    lat(`${t}.echo`);
    if (t === 'trpc') lat('trpc.plainNoTx');
    if (t !== 'store') lat(`${t}.plain`, t === 'trpc' ? `${fmtX(r.transaction.trpc)} no transaction` : '');
    const o = x.overhead;
    lat(`${t}.floor`, `${fmtX(o.floor)} plain`);
    const overhead = `${fmtX(o.ratio)} plain, ${fmtX(o.aboveFloor)} the floor; +${fmtMs(o.ms)} = ${o.statements.toFixed(1)} statements in a transaction`;
    lat(`${t}.fresh`, overhead, ...target(o.ratio, t === 'store' ? 1.4 : 1.25, 'max'));
    lat(`${t}.replay`, `${fmtX(x.replay)} plain`);
    if (t === 'store') {
      lat('store.replayClientReads', `through the adapter ÷ this: ${fmtX(r.store.readsVsClient)}`);
      lat('store.freshThroughClient', `directStatements ÷ this: ${fmtX(r.store.direct)}`);
      if (r.store.named) {
        lat('store.freshUnnamed', `prepared by name ÷ this: ${fmtX(r.store.named.fresh)}`);
        lat('store.replayUnnamed', `prepared by name ÷ this: ${fmtX(r.store.named.replay)}`);
      }
    }
    if (t === 'trpc') {
      lat(
        'trpc.floorReplay',
        `${fmtX(r.trpc.replayFloor)} plain; replay ÷ this: ${fmtX(r.trpc.replayAboveFloor)}`,
      );
      lat('trpc.replayCached', `${fmtX(r.trpc.replayCached)} plain`);
    }
  }
  for (const t of ['trpc', 'yoga'] as const) {
    const label = t === 'trpc' ? 'tRPC' : 'Yoga';
    const plain = m.throughput[`${t}.plain`]!;
    const floor = m.throughput[`${t}.floor`]!;
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
    row(
      `${label}: the floor, c=${CONCURRENCY}`,
      `${floor.perSecond.toFixed(0)}/s`,
      fmtMs(floor.latency.p99),
      '',
      `${fmtX(r[t].throughputFloor)} plain`,
      '',
      '',
    );
    const ratio = r[t].throughput;
    row(
      `${label}: fresh key, c=${CONCURRENCY}`,
      `${fresh.perSecond.toFixed(0)}/s`,
      fmtMs(fresh.latency.p99),
      '',
      `${fmtX(ratio)} plain (median of ${fresh.bursts.length} bursts)`,
      ...target(ratio, 0.8, 'min'),
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
      // 64 answers cost 64 replays at least: the storm is held to 1.5× of that, and one execution.
      '≤ 1.5× replays, once',
      check(r[t].stormVsReplays <= 1.5 && r[t].stormExecutions === 1),
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
    lat(`${name}.fresh`, `ours ÷ theirs ${fmtX(peer.fresh)}`);
    lat(`${name}.replay`, `ours ÷ theirs ${fmtX(peer.replay)}`, ...target(peer.replay, 0.9, 'max'));
    if (peer.replayCached !== undefined) {
      lat(
        `${name}.replayCached`,
        `ours with localCache ÷ theirs ${fmtX(peer.replayCached)}`,
        ...target(peer.replayCached, 0.8, 'max'),
      );
    }
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
      label: 'Fresh key ÷ plain, in process',
      target: { value: 1.4, kind: 'max' as const },
      values: by((r) => r.store.overhead.ratio),
    },
    {
      label: 'Fresh key ÷ plain, tRPC',
      target: { value: 1.25, kind: 'max' as const },
      values: by((r) => r.trpc.overhead.ratio),
    },
    {
      label: 'Fresh key ÷ plain, Yoga',
      target: { value: 1.25, kind: 'max' as const },
      values: by((r) => r.yoga.overhead.ratio),
    },
    {
      label: `Fresh key ÷ plain, throughput at ${CONCURRENCY}, tRPC`,
      target: { value: 0.8, kind: 'min' as const },
      values: by((r) => r.trpc.throughput),
    },
    {
      label: `Fresh key ÷ plain, throughput at ${CONCURRENCY}, Yoga`,
      target: { value: 0.8, kind: 'min' as const },
      values: by((r) => r.yoga.throughput),
    },
    { label: 'Replay ÷ plain, tRPC', values: by((r) => r.trpc.replay) },
    { label: 'Replay ÷ plain, Yoga', values: by((r) => r.yoga.replay) },
    {
      label: 'Replay ÷ Powertools replay (Redis), no cache',
      target: { value: 0.9, kind: 'max' as const },
      values: by((r) => r.peers.powertools?.replay),
    },
    {
      label: 'Replay ÷ node-idempotency replay (Redis)',
      target: { value: 0.9, kind: 'max' as const },
      values: by((r) => r.peers.nodeIdempotency?.replay),
    },
    {
      label: 'Replay, localCache ÷ Powertools, useLocalCache',
      target: { value: 0.8, kind: 'max' as const },
      values: by((r) => r.peers.powertools?.replayCached),
    },
    {
      label: `${STORM} duplicates ÷ ${STORM} replays at once, tRPC`,
      values: by((r) => r.trpc.stormVsReplays),
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
const fingerprintTarget = {
  database: 'in process',
  target: `fingerprint of a ${Math.round(cpu.largeBytes / 1000)} KB input ≤ 1 ms`,
  value: `${cpu.fingerprintLargeMs.toFixed(2)} ms`,
  met: cpu.fingerprintLargeMs <= 1,
};
const targets = [...results.flatMap(({ m, r }) => targetsOf(m, r)), fingerprintTarget, observerTarget];
const seconds = (performance.now() - runStarted) / 1000;
const machine = {
  node: process.version,
  platform: `${os.platform()} ${os.release()}`,
  cpus: os.cpus().length,
  cpuModel: os.cpus()[0]?.model ?? 'unknown',
  loadAverage: { start: loadAtStart, end: os.loadavg() },
  // `npm run bench` builds dist/ and runs it, as an application runs the published package; under
  // `--conditions=source` the library is its TypeScript, through tsx.
  library: import.meta.resolve('idempotent-mutations').includes('/dist/') ? 'dist' : 'src (TypeScript)',
};
const about =
  `${command} — ${takenAt.toISOString()}, ${machine.cpus} × ${machine.cpuModel}, node ${machine.node}, library ${machine.library}, ` +
  `load average ${loadAtStart[0]!.toFixed(1)} → ${machine.loadAverage.end[0]!.toFixed(1)}, ${seconds.toFixed(0)} s`;

console.log(`\n${about}`);
console.log(
  `c=1: ${settings.rounds} interleaved rounds after ${settings.warmup} warm-up; c=${CONCURRENCY}: ${settings.throughputRounds} bursts of ${settings.throughputCalls} calls each; ` +
    `${settings.storms} storms. SQL / RT: statements sent, BEGIN included / round trips (on PostgreSQL BEGIN rides with the first statement, and a fresh key's result with COMMIT).\n`,
);
console.log(textTable(rows));
for (const s of skipped) console.log(`${s.name}: skipped, cannot be reached (${s.reason})`);
console.log(
  `\nin process per call: fingerprint ${cpu.fingerprintUs.toFixed(1)} µs, serialize ${cpu.serializeUs.toFixed(1)} µs, ` +
    `deserialize ${cpu.deserializeUs.toFixed(1)} µs (${cpu.resultBytes}-byte result); ` +
    `at ${Math.round(cpu.largeBytes / 1000)} KB: fingerprint ${cpu.fingerprintLargeMs.toFixed(2)} ms, ` +
    `result stored ${cpu.storeLargeMs.toFixed(2)} ms, JSON.stringify alone ${cpu.stringifyLargeMs.toFixed(2)} ms`,
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
