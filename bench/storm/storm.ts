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
import type { StormAnswer, StormRequest, StormServerSummary } from './protocol.js';

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
async function startServers(urls: string[], count: number, mode: string): Promise<ChildProcess[]> {
  const children = Array.from({ length: count }, (_, p) =>
    fork(serverScript, [urls[p % urls.length]!, mode], {
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

/** Sends requests to one server process and matches its answers by id. */
function clientOf(child: ChildProcess) {
  const pending = new Map<number, (answer: StormAnswer) => void>();
  let summary: (value: StormServerSummary) => void = () => undefined;
  const summarized = new Promise<StormServerSummary>((resolve) => (summary = resolve));
  child.on('message', (message: StormAnswer | StormServerSummary | { ready: true }) => {
    if ('conflicts' in message) return summary(message);
    if (!('id' in message)) return;
    pending.get(message.id)?.(message);
    pending.delete(message.id);
  });
  child.once('exit', () => summary({ conflicts: {} }));
  child.once('exit', (code) => {
    for (const [id, settle] of pending) settle({ id, ok: false, message: `server exited with ${code}` });
  });
  let next = 0;
  const send = (request: Omit<StormRequest, 'id'>) =>
    new Promise<StormAnswer>((resolve) => {
      const id = next++;
      pending.set(id, resolve);
      child.send({ ...request, id });
    });
  /** Stops the process; resolves with what it counted. */
  const stop = () => {
    if (child.connected) child.send('stop');
    return summarized;
  };
  return { send, stop };
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
  } = options;
  const scope = `storm-${randomUUID()}`;
  const children = await startServers(urls, processes, mode);
  const clients = children.map(clientOf);
  const retried: Record<string, number> = {};
  const failures: string[] = [];
  let failed = 0;
  let replays = 0;
  let identicalKeys = 0;

  /** One client's request: retried on 409/503 as `idempotencyLink` would, with short delays. */
  const request = async (key: string, server: number): Promise<number | undefined> => {
    for (let attempt = 1; ; attempt++) {
      const answer = await clients[server]!.send({ scope, key });
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
      await sleep(delay);
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
  const effects = await countEffects(urls[0]!, scope, keys);
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

/** Payments per key, read once the cluster has applied everything it committed. */
async function countEffects(url: string, scope: string, keys: number): Promise<StormReport['effects']> {
  // One connection: a pool also opens its others in the background, and one still opening when the
  // servers are stopped rejects a promise nobody handles (the mariadb connector's ECONNRESET).
  const single = new URL(url);
  single.searchParams.set('connectionLimit', '1');
  const prisma = new PrismaClient({ adapter: (await adapterForUrl(single.toString())) as never });
  try {
    const rows = await prisma.$transaction(async (tx) => {
      // Galera: wait until this node has applied every write set committed before the read.
      await tx.$executeRawUnsafe('SET SESSION wsrep_sync_wait = 1').catch(() => undefined);
      return tx.$queryRawUnsafe<{ user_id: string; n: bigint }[]>(
        'SELECT user_id, COUNT(*) AS n FROM payments WHERE user_id LIKE ? GROUP BY user_id',
        `${scope}:%`,
      );
    });
    const once = rows.filter((row) => Number(row.n) === 1).length;
    const more = rows.filter((row) => Number(row.n) > 1).length;
    return { once, more, none: keys - once - more };
  } finally {
    await prisma.$disconnect();
  }
}
