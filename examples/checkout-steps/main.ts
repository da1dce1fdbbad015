// A three-step checkout whose server dies between the charge and the receipt: the client's retry
// completes it on another server, and no step runs twice. Forks two servers on one database,
// kills the first (SIGKILL) after its second step, and prints what each step left behind; exits 1
// unless every step took effect exactly once.
//
//   npx tsx --conditions=source examples/checkout-steps/main.ts      (DATABASE_URL to use another database)
import { type ChildProcess, fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { createTRPCClient, httpLink } from '@trpc/client';
import { idempotencyHeaders, idempotencyLink } from 'idempotent-mutations/client';
import { defaultDatabaseUrl, openDatabase } from '../shared/database.js';
import { isMain } from '../shared/is-main.js';
import type { CheckoutRouter } from './app.js';

export interface CheckoutScenario {
  /** @default DATABASE_URL, else the examples' SQLite file */
  url?: string;
  /** The servers' lease; the retry waits for the killed server's lease to run out. @default 1_000 */
  leaseMs?: number;
  /**
   * Called once the first server hangs after its second step and before it is killed, with the
   * checkout's scope: a test moves the database's clock past the lease here instead of waiting.
   */
  beforeKill?: (scope: string) => Promise<void>;
}

/** What the scenario left behind: rows per step, and the answers the client got. */
export interface CheckoutTally {
  reserved: number;
  charged: number;
  receipts: number;
  /** The completed checkout, and what two later retries with the same key answered. */
  result: unknown;
  retries: unknown[];
  /** Whether the first server was killed, and by which signal. */
  killedBy: NodeJS.Signals | null;
}

const serverScript = fileURLToPath(new URL('./server.ts', import.meta.url));

export async function runCheckoutScenario(options: CheckoutScenario = {}): Promise<CheckoutTally> {
  const url = options.url ?? process.env.DATABASE_URL ?? defaultDatabaseUrl;
  const leaseMs = options.leaseMs ?? 1_000;
  const prisma = await openDatabase(url); // migrates the database before the servers start
  const userId = `checkout-${randomUUID()}`;
  const [first, second] = await Promise.all([startServer(url, leaseMs, 'charge'), startServer(url, leaseMs)]);
  // A load balancer: requests go to the first server until it dies, then to the second.
  let target = first;
  const client = createTRPCClient<CheckoutRouter>({
    links: [
      idempotencyLink({ retry: { attempts: 8, baseDelayMs: 100, maxDelayMs: 2_000 } }),
      httpLink({
        url: 'http://balancer',
        fetch: (input, init) => fetch(String(input).replace('http://balancer', target.url), init),
        headers: ({ op }) => ({ ...idempotencyHeaders({ op }), 'x-user-id': userId }),
      }),
    ],
  });
  const killed = new Promise<NodeJS.Signals | null>((resolve) =>
    first.process.once('exit', (_, s) => resolve(s)),
  );
  first.crashed.then(async () => {
    await options.beforeKill?.(userId);
    target = second;
    first.process.kill('SIGKILL');
  });
  try {
    const key = randomUUID();
    const checkout = () =>
      client.checkout.mutate({ sku: 'book', amount: '12.50' }, { context: { idempotencyKey: key } });
    const result = await checkout();
    const retries = [await checkout(), await checkout()];
    return {
      reserved: await prisma.order.count({ where: { userId, sku: 'book' } }),
      charged: await prisma.payment.count({ where: { userId } }),
      receipts: await prisma.order.count({ where: { userId, sku: { startsWith: 'receipt:' } } }),
      result,
      retries,
      killedBy: await killed,
    };
  } finally {
    first.process.kill('SIGKILL');
    second.process.kill('SIGTERM');
    await prisma.$disconnect();
  }
}

interface RunningServer {
  process: ChildProcess;
  url: string;
  /** Resolves when the server reports it hangs after its `CRASH_AFTER` step. */
  crashed: Promise<void>;
}

async function startServer(url: string, leaseMs: number, crashAfter?: string): Promise<RunningServer> {
  const child = fork(serverScript, [], {
    env: {
      ...process.env,
      DATABASE_URL: url,
      PORT: '0',
      LEASE_MS: String(leaseMs),
      CRASH_AFTER: crashAfter ?? '',
    },
    execArgv: ['--import', 'tsx', '--conditions=source'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let crashed!: () => void;
  const crash = new Promise<void>((resolve) => (crashed = resolve));
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the checkout server exited (${code}) before listening`)));
    child.on('message', (message: { port?: number; crashedAfter?: string }) => {
      if (message.port) resolve(message.port);
      if (message.crashedAfter) crashed();
    });
  });
  return { process: child, url: `http://127.0.0.1:${port}`, crashed: crash };
}

if (isMain(import.meta.url)) {
  const tally = await runCheckoutScenario();
  console.log(tally);
  const once = tally.reserved === 1 && tally.charged === 1 && tally.receipts === 1;
  console.log(once ? 'Every step took effect exactly once.' : 'A step took effect more or less than once!');
  process.exit(once ? 0 : 1);
}
