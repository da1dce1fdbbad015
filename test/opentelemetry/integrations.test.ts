import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Decimal } from '@prisma/client/runtime/client';
import { PrismaInstrumentation } from '@prisma/instrumentation';
import { initTRPC } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import type { Prisma } from '../../generated/sqlite/client.js';
import { useIdempotency } from '../../src/envelop/index.js';
import { runIdempotent } from '../../src/index.js';
import {
  ATTR_FIRST_ATTEMPT,
  ATTR_KEY_SOURCE,
  ATTR_OUTCOME,
  ATTR_TX_RETRIES,
  METRIC_CALLS,
  METRIC_TX_RETRIES,
} from '../../src/opentelemetry/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { idempotency } from '../../src/trpc/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';
import { isChildOf, telemetryHarness } from '../helpers/telemetry.js';

const harness = telemetryHarness();
const { tracer, spans, telemetry } = harness;
// Prisma's own spans, through the tracer provider under test.
const prismaInstrumentation = new PrismaInstrumentation();
prismaInstrumentation.setTracerProvider(harness.tracerProvider);
prismaInstrumentation.enable();

/** The spans of `root`'s trace below it, by walking parent links. */
function descendantsOf(root: ReadableSpan): ReadableSpan[] {
  const all = spans().filter((s) => s.spanContext().traceId === root.spanContext().traceId);
  const below = new Set([root.spanContext().spanId]);
  const found: ReadableSpan[] = [];
  for (let grew = true; grew; ) {
    grew = false;
    for (const span of all) {
      const parent = span.parentSpanContext?.spanId;
      if (parent && below.has(parent) && !below.has(span.spanContext().spanId)) {
        below.add(span.spanContext().spanId);
        found.push(span);
        grew = true;
      }
    }
  }
  return found;
}

/** The idempotency span of the request span named `request`. */
function callSpanUnder(request: string): ReadableSpan {
  const parent = spans().find((s) => s.name === request)!;
  const children = spans().filter((s) => s.name.startsWith('idempotency ') && isChildOf(s, parent));
  expect(children).toHaveLength(1);
  return children[0]!;
}

describeEachDatabase('Spans of idempotent calls with Prisma', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(async () => {
    await prisma?.$disconnect();
  });

  it('nests the call’s span under a tRPC request span, and Prisma’s spans under the call’s', async () => {
    const userId = uniqueScope();
    const t = initTRPC.context<{ req: Request; userId: string }>().create();
    const router = t.router({
      pay: t.procedure
        .input(z.object({ amount: z.string() }))
        .use(
          idempotency({
            store: prismaStore(prisma),
            scope: ({ ctx }) => ctx.userId,
            observe: telemetry.observe,
          }),
        )
        .mutation(({ ctx, input }) =>
          ctx.tx.payment.create({ data: { userId, amount: new Decimal(input.amount), currency: 'EUR' } }),
        ),
    });
    const send = (name: string, headers: Record<string, string> = {}) =>
      tracer.startActiveSpan(name, async (request) => {
        const response = await fetchRequestHandler({
          endpoint: '/trpc',
          router,
          req: new Request('http://localhost/trpc/pay', {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'Idempotency-Key': 'pay-1', ...headers },
            body: JSON.stringify({ amount: '3.00' }),
          }),
          createContext: ({ req }) => ({ req, userId }),
        });
        request.end();
        return response.status;
      });
    expect(await send('POST /trpc/pay (first)', { 'Idempotency-Attempt': '1' })).toBe(200);
    expect(await send('POST /trpc/pay (retry)', { 'Idempotency-Attempt': '2' })).toBe(200);
    expect(await prisma.payment.count({ where: { userId } })).toBe(1);

    const first = callSpanUnder('POST /trpc/pay (first)');
    expect(first.attributes).toMatchObject({
      [ATTR_OUTCOME]: 'executed',
      [ATTR_KEY_SOURCE]: 'header',
      [ATTR_FIRST_ATTEMPT]: true,
    });
    // No read (a first attempt), one transaction holding the claim, the resolver's insert and the
    // completion. `adapterForUrl`'s adapter sends the claim and the completion past Prisma's client
    // (`directStatements`): they are the call span's claim and store events, not Prisma operations.
    const below = descendantsOf(first);
    const transaction = below.find((s) => s.name === 'prisma:client:transaction');
    expect(transaction && isChildOf(transaction, first)).toBe(true);
    const operations = below.filter(
      (s) => s.name === 'prisma:client:operation' && isChildOf(s, transaction!),
    );
    expect(operations).toHaveLength(1);
    expect(first.events.map((event) => event.name)).toEqual(
      ['claim', 'resolver', 'store'].flatMap((phase) => [
        `idempotency.${phase}.start`,
        `idempotency.${phase}.end`,
      ]),
    );
    const retry = callSpanUnder('POST /trpc/pay (retry)');
    expect(retry.attributes[ATTR_OUTCOME]).toBe('replayed');
    expect(retry.attributes[ATTR_FIRST_ATTEMPT]).toBeUndefined();
    expect(descendantsOf(retry).some((s) => s.name.startsWith('prisma:'))).toBe(true);
  });

  it('nests the call’s span under a Yoga request span, with the key from the argument', async () => {
    const userId = uniqueScope();
    const yoga = createYoga({
      schema: createSchema<{ tx: Prisma.TransactionClient }>({
        typeDefs: /* GraphQL */ `
          type Query { ok: Boolean }
          type Mutation { pay(amount: String!, idempotencyKey: String): Int! }
        `,
        resolvers: {
          Mutation: {
            pay: async (
              _: unknown,
              { amount }: { amount: string },
              { tx }: { tx: Prisma.TransactionClient },
            ) =>
              (await tx.payment.create({ data: { userId, amount: new Decimal(amount), currency: 'EUR' } }))
                .id,
          },
        },
      }),
      plugins: [
        useIdempotency({ store: prismaStore(prisma), scope: () => userId, observe: telemetry.observe }),
      ],
    });
    const send = (name: string) =>
      tracer.startActiveSpan(name, async (request) => {
        const response = await yoga.fetch('http://localhost/graphql', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ query: 'mutation { pay(amount: "4.00", idempotencyKey: "pay-1") }' }),
        });
        request.end();
        return (await response.json()) as { data?: { pay: number } };
      });
    const first = await send('POST /graphql (first)');
    expect((await send('POST /graphql (retry)')).data).toEqual(first.data);
    expect(await prisma.payment.count({ where: { userId } })).toBe(1);

    const call = callSpanUnder('POST /graphql (first)');
    expect(call.name).toBe('idempotency Mutation.pay');
    expect(call.attributes).toMatchObject({ [ATTR_OUTCOME]: 'executed', [ATTR_KEY_SOURCE]: 'argument' });
    expect(descendantsOf(call).filter((s) => s.name.startsWith('prisma:')).length).toBeGreaterThanOrEqual(3);
    expect(callSpanUnder('POST /graphql (retry)').attributes[ATTR_OUTCOME]).toBe('replayed');
  });

  it('marks a concurrent duplicate that waited for the first call, which ran once', async () => {
    const userId = uniqueScope();
    const started = gate();
    const release = gate();
    let runs = 0;
    const options = {
      store: prismaStore(prisma),
      scope: userId,
      key: 'k',
      operation: 'orders.create',
      input: {},
      observe: telemetry.observe,
    };
    const pay = (name: string) =>
      tracer.startActiveSpan(name, async (request) => {
        const result = await runIdempotent(options, async (tx) => {
          runs++;
          started.open();
          await release.opened;
          await tx.payment.create({ data: { userId, amount: new Decimal('6'), currency: 'EUR' } });
          return 'paid';
        });
        request.end();
        return result;
      });
    const first = pay('first');
    await started.opened;
    const duplicate = pay('duplicate');
    release.open();
    expect((await Promise.all([first, duplicate])).map((r) => r.replayed)).toEqual([false, true]);
    expect(runs).toBe(1);
    expect(await prisma.payment.count({ where: { userId } })).toBe(1);
    const waited = callSpanUnder('duplicate');
    expect(waited.attributes[ATTR_OUTCOME]).toBe('waited_then_replayed');
    expect(waited.events.map((e) => e.name)).toEqual(['idempotency.wait.start', 'idempotency.wait.end']);
    expect(callSpanUnder('first').attributes[ATTR_OUTCOME]).toBe('executed');
  });

  it('counts a write conflict the store retried', async () => {
    if (db.provider !== 'postgresql') return; // raising a serialization failure on demand needs PL/pgSQL
    const userId = uniqueScope();
    let attempts = 0;
    const before = (await harness.points(METRIC_TX_RETRIES))[0]?.value ?? 0;
    await tracer.startActiveSpan('job', async (job) => {
      await runIdempotent(
        {
          store: prismaStore(prisma),
          scope: userId,
          key: 'k',
          operation: 'payments.create',
          input: {},
          observe: telemetry.observe,
        },
        async (tx) => {
          await tx.payment.create({ data: { userId, amount: new Decimal('5'), currency: 'EUR' } });
          if (attempts++ === 0) {
            await tx.$executeRawUnsafe(
              "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$",
            );
          }
          return 'paid';
        },
      );
      job.end();
    });
    expect(attempts).toBe(2);
    expect(await prisma.payment.count({ where: { userId } })).toBe(1);
    const call = callSpanUnder('job');
    expect(call.attributes).toMatchObject({ [ATTR_OUTCOME]: 'executed', [ATTR_TX_RETRIES]: 1 });
    expect((await harness.points(METRIC_TX_RETRIES))[0]?.value).toBe(Number(before) + 1);
    const counted = await harness.points(METRIC_CALLS);
    expect(counted.some((p) => p.attributes[ATTR_OUTCOME] === 'executed')).toBe(true);
  });
});
