// The exactly-once storm: `keys` keys, each sent `duplicates` times at once, spread over server
// processes that each have a Prisma client on one database node. Counted afterwards, in the
// database: the business rows (payments) per key; and from the answers: that every duplicate of a
// key got the same payment. Retryable answers (409 in progress, 503) are retried as the shipped
// clients do, bounded.
import { type ChildProcess, fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { adapterForUrl } from 'idempotent-mutations/prisma';
import { PrismaClient } from '../../generated/mysql/client.js';
import { RETRYABLE_CODES, retryDelay } from '../../src/client/retry-policy.js';
import { until } from '../../test/helpers/private-server.js';
import type { StormAnswer, StormRequest, StormServerCalls, StormServerSummary } from './protocol.js';

/** What a storm runs. */
export interface StormOptions {
  /** One URL per database node; server process `p` connects to `urls[p % urls.length]`. */
  urls: string[];
  mode: 'transactional' | 'lease';
  /** @default 4 */
  processes?: number;
  /** @default 1_000 */
  keys?: number;
  /** Concurrent requests per key. @default 8 */
  duplicates?: number;
  /** Keys whose duplicates are in flight at once. @default 16 */
  keysInFlight?: number;
  /** Attempts per request, the first included, for retryable answers (delays of 20 to 200 ms). @default 100 */
  attempts?: number;
  /**
   * How long a request may take, its retries included. A request without a final answer by then
   * fails, with what every server process and node holds for its key (see `unanswered`), rather
   * than the storm waiting forever or retrying a dead node 100 times. @default 60_000
   */
  answerTimeoutMs?: number;
  /** How long a server waits for a duplicate's running call before answering 409. @default the library's */
  waitTimeoutMs?: number;
  /** The scope of every key (a test claims one first). @default a fresh one */
  scope?: string;
  /** Called once every server process is ready, with their pids (a test kills one). */
  onReady?: (pids: number[]) => void;
}

/** What a storm counted. */
export interface StormReport {
  mode: 'transactional' | 'lease';
  nodes: number;
  processes: number;
  keys: number;
  duplicates: number;
  /** Keys with exactly one payment, none, more than one. */
  effects: { once: number; none: number; more: number };
  /** Keys whose duplicates all answered the same payment. */
  identicalKeys: number;
  /** Answers that were replays of a stored result. */
  replays: number;
  /** Retryable answers that were retried, by code. */
  retried: Record<string, number>;
  /**
   * Database errors the server processes' Prisma clients raised before the store retried or
   * mapped them, by where they surfaced (`commit`, `statement in transaction`, `statement`) and code.
   */
  conflicts: Record<string, number>;
  /** Requests that ended without a result (first few messages). */
  failures: string[];
  failed: number;
  seconds: number;
  /** Requests answered per second (each duplicate counts once, its retries do not). */
  requestsPerSecond: number;
}

const serverScript = fileURLToPath(new URL('./server-process.ts', import.meta.url));

/** Forks the server processes, waits until each is ready; kills them when this process exits. */
async function startServers(
  urls: string[],
  count: number,
  mode: string,
  waitTimeoutMs: number | undefined,
): Promise<ChildProcess[]> {
  const wait = waitTimeoutMs === undefined ? [] : [String(waitTimeoutMs)];
  const children = Array.from({ length: count }, (_, p) =>
    fork(serverScript, [urls[p % urls.length]!, mode, ...wait], {
      execArgv: ['--import', 'tsx', '--conditions=source'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  const kill = () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  };
  process.once('exit', kill);
  for (const child of children) child.once('exit', () => process.removeListener('exit', kill));
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve, reject) => {
          child.once('message', () => resolve());
          child.once('exit', (code) => reject(new Error(`a storm server process exited with ${code}`)));
        }),
    ),
  );
  return children;
}

/** How a process ended: its exit code, or the signal that killed it. */
const exitOf = (child: ChildProcess) => child.exitCode ?? child.signalCode;

/** Sends requests to one server process and matches its answers by id. */
function clientOf(child: ChildProcess) {
  const pending = new Map<number, (answer: StormAnswer) => void>();
  let summary: (value: StormServerSummary) => void = () => undefined;
  const summarized = new Promise<StormServerSummary>((resolve) => (summary = resolve));
  const callsWanted: ((calls: StormServerCalls) => void)[] = [];
  child.on('message', (message: StormAnswer | StormServerSummary | StormServerCalls | { ready: true }) => {
    if ('conflicts' in message) return summary(message);
    if ('calls' in message) {
      for (const wanted of callsWanted.splice(0)) wanted(message);
      return;
    }
    if (!('id' in message)) return;
    pending.get(message.id)?.(message);
    pending.delete(message.id);
  });
  child.once('exit', () => summary({ conflicts: {} }));
  child.once('exit', () => {
    for (const [id, settle] of pending)
      settle({ id, ok: false, message: `server exited with ${exitOf(child)}` });
    for (const wanted of callsWanted.splice(0)) wanted({ calls: [] });
  });
  let next = 0;
  const send = (request: Omit<StormRequest, 'id'>) =>
    new Promise<StormAnswer>((resolve) => {
      const id = next++;
      // A process that has exited fails the request (child.send would emit an 'error' nobody hears).
      if (!child.connected) return resolve({ id, ok: false, message: `server exited with ${exitOf(child)}` });
      pending.set(id, resolve);
      child.send({ ...request, id }, (error) => {
        if (!error) return;
        pending.delete(id);
        resolve({ id, ok: false, message: `server unreachable: ${error.message}` });
      });
    });
  /** The requests the process has not answered yet (none once it has exited). */
  const calls = () =>
    new Promise<StormServerCalls>((resolve) => {
      if (!child.connected) return resolve({ calls: [] });
      callsWanted.push(resolve);
      child.send('calls', (error) => error && resolve({ calls: [] }));
    });
  /** Stops the process; resolves with what it counted. */
  const stop = () => {
    if (child.connected) child.send('stop');
    return summarized;
  };
  return { send, calls, stop };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs one storm and counts what it did (see the file's comment). */
export async function runStorm(options: StormOptions): Promise<StormReport> {
  const {
    urls,
    mode,
    processes = 4,
    keys = 1_000,
    duplicates = 8,
    keysInFlight = 16,
    attempts = 100,
    answerTimeoutMs = 60_000,
  } = options;
  const scope = options.scope ?? `storm-${randomUUID()}`;
  const children = await startServers(urls, processes, mode, options.waitTimeoutMs);
  options.onReady?.(children.map((child) => child.pid!));
  const clients = children.map(clientOf);
  const retried: Record<string, number> = {};
  const failures: string[] = [];
  let failed = 0;
  let replays = 0;
  let identicalKeys = 0;

  /** One client's request: retried on 409/503 as `idempotencyLink` would, with short delays. */
  const request = async (key: string, server: number): Promise<number | undefined> => {
    const deadline = performance.now() + answerTimeoutMs;
    /** The retryable answers so far, and the last one's code. */
    const retryable = { count: 0, last: '' };
    for (let attempt = 1; ; attempt++) {
      const answer = await within(deadline - performance.now(), clients[server]!.send({ scope, key }));
      if (answer === undefined) {
        failed++;
        const why = await unanswered({ scope, key, server, answerTimeoutMs, retryable, clients, urls });
        if (failures.length < 10) failures.push(`error: ${why}`);
        return undefined;
      }
      if (answer.ok) {
        if (answer.replayed) replays++;
        return answer.paymentId;
      }
      const delay =
        answer.code && RETRYABLE_CODES.has(answer.code)
          ? retryDelay({ kind: 'status', status: 409, retryAfterMs: answer.retryAfterMs }, attempt, {
              attempts,
              baseDelayMs: 20,
              maxDelayMs: 200,
            })
          : undefined;
      if (delay === undefined) {
        failed++;
        if (failures.length < 10) failures.push(`${answer.code ?? 'error'}: ${answer.message}`);
        return undefined;
      }
      retried[answer.code!] = (retried[answer.code!] ?? 0) + 1;
      retryable.count++;
      retryable.last = answer.code!;
      await sleep(Math.min(delay, Math.max(0, deadline - performance.now())));
    }
  };

  const started = performance.now();
  let nextKey = 0;
  const lane = async () => {
    for (let k = nextKey++; k < keys; k = nextKey++) {
      const key = `key-${k}`;
      // Duplicate d of key k goes to server (k + d) % processes: every key reaches every server.
      const answers = await Promise.all(
        Array.from({ length: duplicates }, (_, d) => request(key, (k + d) % processes)),
      );
      if (answers[0] !== undefined && answers.every((a) => a === answers[0])) identicalKeys++;
    }
  };
  const conflicts: Record<string, number> = {};
  try {
    await Promise.all(Array.from({ length: keysInFlight }, lane));
  } finally {
    for (const { conflicts: counted } of await Promise.all(clients.map((client) => client.stop()))) {
      for (const [name, n] of Object.entries(counted)) conflicts[name] = (conflicts[name] ?? 0) + n;
    }
  }
  const seconds = (performance.now() - started) / 1000;
  const effects = await countEffects(urls, scope, keys);
  return {
    mode,
    nodes: urls.length,
    processes,
    keys,
    duplicates,
    effects,
    identicalKeys,
    replays,
    retried,
    conflicts,
    failures,
    failed,
    seconds,
    requestsPerSecond: (keys * duplicates) / seconds,
  };
}

/** `promise`'s value, or `undefined` when it has not settled within `ms`. */
async function within<T>(ms: number, promise: Promise<T>): Promise<T | undefined> {
  if (ms <= 0) return undefined;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<undefined>((resolve) => {
    timer = setTimeout(resolve, ms, undefined);
  });
  try {
    const first = await Promise.race([promise.then((value) => ({ value })), timedOut]);
    return first?.value;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Why a request went unanswered, as far as can be seen from outside: the calls every server
 * process has in flight for its key (and how many in all), and on every node the key's record
 * and the statements running.
 */
async function unanswered(request: {
  scope: string;
  key: string;
  server: number;
  answerTimeoutMs: number;
  retryable: { count: number; last: string };
  clients: { calls(): Promise<StormServerCalls> }[];
  urls: string[];
}): Promise<string> {
  const { scope, key, server, answerTimeoutMs, retryable, clients, urls } = request;
  const before = retryable.count
    ? ` (after ${retryable.count} retryable answers, the last ${retryable.last})`
    : '';
  const lines = [
    `no final answer in ${answerTimeoutMs / 1000} s from server process ${server} for ${key}${before}`,
  ];
  const inFlight = await Promise.all(clients.map((client) => within(5_000, client.calls())));
  for (const [p, answer] of inFlight.entries()) {
    const mine = answer?.calls.filter((call) => call.key === key) ?? [];
    lines.push(
      `  process ${p}: ${answer ? `${answer.calls.length} calls in flight` : 'did not say (5 s)'}${mine
        .map((call) => `; ${key} in ${call.phase} for ${(call.forMs / 1000).toFixed(1)} s`)
        .join('')}`,
    );
  }
  for (const [n, url] of urls.entries()) {
    const state = (await within(10_000, nodeState(url, scope, key))) ?? 'did not answer (10 s)';
    lines.push(`  node ${n + 1}: ${state}`);
  }
  return lines.join('\n');
}

/**
 * A client of one connection on `url`: a pool also opens its others in the background, and one
 * still opening when the servers are stopped rejects a promise nobody handles (the mariadb
 * connector's ECONNRESET).
 */
async function singleConnection(url: string): Promise<PrismaClient> {
  const single = new URL(url);
  single.searchParams.set('connectionLimit', '1');
  return new PrismaClient({ adapter: (await adapterForUrl(single.toString())) as never });
}

/** The key's record on one node, by the node's clock, and the statements it is running. */
async function nodeState(url: string, scope: string, key: string): Promise<string> {
  const prisma = await singleConnection(url);
  try {
    const records = await prisma.$queryRawUnsafe<Record<string, unknown>[]>(
      `SELECT status, owner_token IS NOT NULL AS owned, TIMESTAMPDIFF(MICROSECOND, NOW(3), locked_until) DIV 1000 AS lease_left_ms,
              completed_at FROM idempotency_records WHERE scope = ? AND idempotency_key = ?`,
      scope,
      key,
    );
    const running = await prisma.$queryRawUnsafe<Record<string, unknown>[]>(
      "SELECT time, state, info FROM information_schema.processlist WHERE command <> 'Sleep' AND info NOT LIKE '%processlist%'",
    );
    const json = (value: unknown) => JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? Number(v) : v));
    return `record ${json(records[0] ?? null)}; running ${json(running)}`;
  } catch (error) {
    return `unreadable: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    await prisma.$disconnect();
  }
}

/** A client that can read the node's status: `PrismaClient`, or a test's. */
interface NodeClient {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T>;
}

/**
 * Waits until `first` has committed every write set that any of `nodes` had committed when this
 * was called: Galera commits write sets in one order on every node, so `first` then holds every
 * write the cluster had. A node that cannot answer (it died) has nothing the others do not, and is
 * left out; plain MariaDB nodes have no write sets, and nothing is waited for.
 */
export async function caughtUp(first: NodeClient, nodes: NodeClient[], timeoutMs = 30_000): Promise<void> {
  const lastCommitted = async (node: NodeClient) => {
    const [row] = await node.$queryRawUnsafe<{ Value: string }[]>(
      "SHOW GLOBAL STATUS LIKE 'wsrep_last_committed'",
    );
    return row ? BigInt(row.Value) : undefined;
  };
  const committed = await Promise.all(nodes.map((node) => lastCommitted(node).catch(() => undefined)));
  const target = committed.reduce<bigint | undefined>(
    (max, n) => (n !== undefined && (max === undefined || n > max) ? n : max),
    undefined,
  );
  if (target === undefined) return;
  await until(
    `node 1 has committed write set ${target}`,
    async () => ((await lastCommitted(first)) ?? -1n) >= target,
    timeoutMs,
  );
}

/** Payments per key, read on the first node once it has caught up with every node (`caughtUp`). */
async function countEffects(urls: string[], scope: string, keys: number): Promise<StormReport['effects']> {
  const nodes = await Promise.all(urls.map(singleConnection));
  try {
    const first = nodes[0]!;
    await caughtUp(first, nodes);
    const rows = await first.$queryRawUnsafe<{ user_id: string; n: bigint }[]>(
      'SELECT user_id, COUNT(*) AS n FROM payments WHERE user_id LIKE ? GROUP BY user_id',
      `${scope}:%`,
    );
    const once = rows.filter((row) => Number(row.n) === 1).length;
    const more = rows.filter((row) => Number(row.n) > 1).length;
    return { once, more, none: keys - once - more };
  } finally {
    await Promise.all(nodes.map((node) => node.$disconnect()));
  }
}
