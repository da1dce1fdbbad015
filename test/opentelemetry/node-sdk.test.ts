import { trace } from '@opentelemetry/api';
import { AggregationTemporality, InMemoryMetricExporter } from '@opentelemetry/sdk-metrics';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { Decimal } from '@prisma/client/runtime/client';
import { initTRPC } from '@trpc/server';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { ATTR_OUTCOME, METRIC_CALLS } from '../../src/opentelemetry/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { idempotency } from '../../src/trpc/index.js';
import { connect, databases, uniqueScope } from '../helpers/databases.js';
import { observeIdempotency, startTelemetry } from './samples/node-sdk.js';

// The README's wiring, run as pasted: the Node SDK with Prisma's instrumentation, on SQLite.
// The in-memory exporters forget what they hold when shut down; these keep it for the assertions.
class KeptSpans extends InMemorySpanExporter {
  override async shutdown() {}
}
class KeptMetrics extends InMemoryMetricExporter {
  override async shutdown() {}
}
const spans = new KeptSpans();
const metricPoints = new KeptMetrics(AggregationTemporality.CUMULATIVE);
const sdk = startTelemetry(spans, metricPoints);
let prisma: Awaited<ReturnType<typeof connect>>;

beforeAll(async () => {
  prisma = await connect(databases[0]!);
});
afterAll(async () => {
  await prisma?.$disconnect();
});

it('exports the call’s span with Prisma’s spans under it, and the calls counter', async () => {
  const { observe, stop } = observeIdempotency(prisma);
  const userId = uniqueScope();
  const t = initTRPC.context<{ headers: Headers }>().create();
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.string() }))
      .use(idempotency({ store: prismaStore(prisma), scope: () => userId, observe }))
      .mutation(({ ctx, input }) =>
        ctx.tx.payment.create({ data: { userId, amount: new Decimal(input.amount), currency: 'EUR' } }),
      ),
  });
  const caller = router.createCaller({ headers: new Headers({ 'Idempotency-Key': 'pay-1' }) });
  const tracer = trace.getTracer('test');
  await tracer.startActiveSpan('POST /trpc/pay', async (request) => {
    await caller.pay({ amount: '3.00' });
    await caller.pay({ amount: '3.00' });
    request.end();
  });
  await stop();
  await sdk.shutdown(); // flushes both exporters

  const exported = spans.getFinishedSpans();
  const calls = exported.filter((s) => s.name === 'idempotency pay');
  expect(calls.map((s) => s.attributes[ATTR_OUTCOME])).toEqual(['executed', 'replayed']);
  const callIds = new Set(calls.map((s) => s.spanContext().spanId));
  expect(
    exported.some((s) => s.name.startsWith('prisma:') && callIds.has(s.parentSpanContext?.spanId ?? '')),
  ).toBe(true);
  const counted = metricPoints
    .getMetrics()
    .flatMap((r) => r.scopeMetrics.flatMap((s) => s.metrics))
    .filter((m) => m.descriptor.name === METRIC_CALLS)
    .at(-1);
  expect(counted?.dataPoints.map((p) => [p.attributes[ATTR_OUTCOME], p.value]).sort()).toEqual([
    ['executed', 1],
    ['replayed', 1],
  ]);
});
