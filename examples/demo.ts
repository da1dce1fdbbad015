// `npm run demo`: the tRPC payments example and the Yoga orders example on one database (embedded
// SQLite unless DATABASE_URL says otherwise), each behind a flaky loopback proxy, driven by the
// library's retrying clients through what goes wrong in real life: a response lost after the server
// committed, a double submit, a 503, a key reused with another body. Prints what was sent and what
// happened, and exits 0 only if every mutation took effect exactly once.
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { createServer as createHttpServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createTRPCClient, httpLink, TRPCClientError } from '@trpc/client';
import type { IdempotencyEvent } from 'idempotent-mutations';
import { idempotencyHeaders, idempotencyLink, idempotentFetch } from 'idempotent-mutations/client';
import { providerOfUrl } from 'idempotent-mutations/prisma';
import superjson from 'superjson';
import { defaultDatabaseUrl, openDatabase } from './shared/database.js';
import { startFaultProxy } from './shared/fault-proxy.js';
import { isMain } from './shared/is-main.js';
import { type AppRouter, createServer as createPaymentsServer } from './trpc-payments/app.js';
import { createOrderServer } from './yoga-orders/app.js';

/** What one API went through, for the report. */
interface Tally {
  attempts: number;
  lostResponses: number;
  runs: number;
  replays: number;
  rejections: Record<string, number>;
  rows: number;
  expectedRows: number;
}

/** Counts the server's idempotency events: resolver runs, replays, rejections by code. */
function eventCounter() {
  const counts = { runs: 0, replays: 0, rejections: {} as Record<string, number> };
  const onEvent = (event: IdempotencyEvent) => {
    if (event.type === 'claimed' || event.type === 'expired_takeover') counts.runs++;
    if (event.type === 'replayed') counts.replays++;
    const code =
      event.type === 'mismatch'
        ? 'IDEMPOTENCY_KEY_MISMATCH'
        : event.type === 'in_progress'
          ? 'IDEMPOTENCY_KEY_IN_PROGRESS'
          : undefined;
    if (code) counts.rejections[code] = (counts.rejections[code] ?? 0) + 1;
  };
  return { counts, onEvent };
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const quickRetries = { attempts: 5, baseDelayMs: 50, maxDelayMs: 500 };

export async function runDemo(databaseUrl = process.env.DATABASE_URL ?? defaultDatabaseUrl) {
  // The embedded default starts from an empty file each time.
  if (databaseUrl === defaultDatabaseUrl) await rm(databaseUrl.slice('file:'.length), { force: true });
  const prisma = await openDatabase(databaseUrl);
  const user = `demo-${randomUUID().slice(0, 8)}`;
  const servers: Server[] = [];
  const proxies: { close(): Promise<void> }[] = [];
  try {
    // --- tRPC: createPayment behind idempotency(), called through idempotencyLink -------------
    const payments = eventCounter();
    const paymentsServer = createPaymentsServer(prisma, { onEvent: payments.onEvent });
    servers.push(paymentsServer);
    const paymentsProxy = await startFaultProxy(await listen(paymentsServer));
    proxies.push(paymentsProxy);
    const trpc = createTRPCClient<AppRouter>({
      links: [
        idempotencyLink({ retry: quickRetries }),
        httpLink({
          url: paymentsProxy.url,
          transformer: superjson,
          headers: ({ op }) => ({ ...idempotencyHeaders({ op }), 'x-user-id': user }),
        }),
      ],
    });

    // 1. The server commits, the response is lost; the link retries with the same key.
    paymentsProxy.plan('lose-response');
    await trpc.createPayment.mutate({ amount: '19.99', currency: 'EUR' });
    // 2. A double submit: two requests at once with one key (the caller supplies it).
    const doubleKey = randomUUID();
    const [first, second] = await Promise.all([
      trpc.createPayment.mutate(
        { amount: '5.00', currency: 'EUR' },
        { context: { idempotencyKey: doubleKey } },
      ),
      trpc.createPayment.mutate(
        { amount: '5.00', currency: 'EUR' },
        { context: { idempotencyKey: doubleKey } },
      ),
    ]);
    if (first.id !== second.id) throw new Error('the double submit made two payments');
    // 3. A 503 answered in front of the server (a load balancer between two deploys, say): the
    //    request never reached it, and the retry with the same key goes through.
    paymentsProxy.plan({ status: 503, headers: { 'content-type': 'application/json' }, body: '{}' });
    await trpc.createPayment.mutate({ amount: '42.00', currency: 'EUR' });
    // 4. The double submit's key reused with another amount: 422, never retried.
    const mismatch = await trpc.createPayment
      .mutate({ amount: '500.00', currency: 'EUR' }, { context: { idempotencyKey: doubleKey } })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    const mismatchCode =
      mismatch instanceof TRPCClientError
        ? (mismatch.data as { idempotencyCode?: string })?.idempotencyCode
        : undefined;
    if (mismatchCode !== 'IDEMPOTENCY_KEY_MISMATCH') throw new Error('the reused key was not rejected');
    await paymentsProxy.settled();
    const trpcTally: Tally = {
      attempts: paymentsProxy.requests.length,
      lostResponses: paymentsProxy.requests.filter((r) => r.action === 'lose-response').length,
      ...payments.counts,
      rows: await prisma.payment.count({ where: { userId: user } }),
      expectedRows: 3,
    };

    // --- GraphQL Yoga: createOrder behind useIdempotency(), called through idempotentFetch ---
    const orders = eventCounter();
    const ordersServer = createHttpServer(createOrderServer(prisma, { onEvent: orders.onEvent }));
    servers.push(ordersServer);
    const ordersProxy = await startFaultProxy(await listen(ordersServer));
    proxies.push(ordersProxy);
    const graphqlFetch = idempotentFetch(fetch, { retry: quickRetries });
    // Without a key argument, idempotentFetch keys the operation with a header; with one, the field
    // carries its own key and idempotentFetch just retries with it.
    const createOrder = (unitPrice: string, headers: Record<string, string> = {}, key?: string) =>
      graphqlFetch(`${ordersProxy.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-user-id': user, ...headers },
        body: JSON.stringify({
          query: key
            ? 'mutation Order($input: OrderInput!, $key: String) { createOrder(input: $input, idempotencyKey: $key) { id total } }'
            : 'mutation Order($input: OrderInput!) { createOrder(input: $input) { id total } }',
          variables: { input: { sku: 'TEA-01', quantity: 2, unitPrice }, key },
        }),
      }).then(
        (response) =>
          response.json() as Promise<{ data?: unknown; errors?: { extensions?: { code?: string } }[] }>,
      );

    // 1. Lost response: idempotentFetch gave the operation a key header and retries with it.
    ordersProxy.plan('lose-response');
    await createOrder('3.50');
    // 2. A double submit of one operation, one Idempotency-Key header.
    const orderKey = randomUUID();
    const [a, b] = await Promise.all([
      createOrder('7.25', { 'idempotency-key': orderKey }),
      createOrder('7.25', { 'idempotency-key': orderKey }),
    ]);
    if (JSON.stringify(a.data) !== JSON.stringify(b.data))
      throw new Error('the double submit made two orders');
    // 3. A field-level key (the idempotencyKey argument) reused with another price: 422.
    const fieldKey = randomUUID();
    await createOrder('1.00', {}, fieldKey);
    const rejected = await createOrder('9.99', {}, fieldKey);
    if (rejected.errors?.[0]?.extensions?.code !== 'IDEMPOTENCY_KEY_MISMATCH') {
      throw new Error('the reused field key was not rejected');
    }
    await ordersProxy.settled();
    const yogaTally: Tally = {
      attempts: ordersProxy.requests.length,
      lostResponses: ordersProxy.requests.filter((r) => r.action === 'lose-response').length,
      ...orders.counts,
      rows: await prisma.order.count({ where: { userId: user } }),
      expectedRows: 3,
    };
    return { provider: providerOfUrl(databaseUrl), trpc: trpcTally, yoga: yogaTally };
  } finally {
    await Promise.all(proxies.map((proxy) => proxy.close()));
    for (const server of servers) server.close();
    await prisma.$disconnect();
  }
}

/** Exactly once: as many rows as logical mutations that succeeded, each resolver run once. */
export function exactlyOnce(tally: Tally): boolean {
  return tally.rows === tally.expectedRows && tally.runs === tally.expectedRows;
}

function report(name: string, tally: Tally): string {
  const rejections = Object.entries(tally.rejections)
    .map(([code, n]) => `${code} ×${n}`)
    .join(', ');
  return [
    `${name}`,
    `  requests sent through the flaky proxy  ${tally.attempts} (${tally.lostResponses} ${tally.lostResponses === 1 ? 'response' : 'responses'} lost on the way back)`,
    `  resolver runs                          ${tally.runs}`,
    `  replays of a stored result             ${tally.replays}`,
    `  rejections                             ${rejections || 'none'}`,
    `  rows in the business table             ${tally.rows} (expected ${tally.expectedRows})`,
    `  → ${exactlyOnce(tally) ? 'every mutation happened exactly once' : 'NOT exactly once'}`,
  ].join('\n');
}

if (isMain(import.meta.url)) {
  const started = performance.now();
  const { provider, trpc, yoga } = await runDemo();
  console.log(`idempotent-mutations demo on ${provider}\n`);
  console.log(report('tRPC  createPayment  (idempotency() middleware, idempotencyLink client)', trpc));
  console.log();
  console.log(report('Yoga  createOrder    (useIdempotency() plugin, idempotentFetch client)', yoga));
  console.log(`\nfinished in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  process.exitCode = exactlyOnce(trpc) && exactlyOnce(yoga) ? 0 : 1;
}
