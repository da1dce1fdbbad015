import { PeriodicExportingMetricReader, type PushMetricExporter } from '@opentelemetry/sdk-metrics';
import { NodeSDK } from '@opentelemetry/sdk-node';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import { PrismaInstrumentation } from '@prisma/instrumentation';
import { idempotencyTelemetry } from 'idempotent-mutations/opentelemetry';
import { type PrismaQueryable, recordStats, startSweeper } from 'idempotent-mutations/prisma';

/**
 * At startup, before the server handles requests. The exporters are yours: e.g. `OTLPTraceExporter`
 * and `OTLPMetricExporter` from `@opentelemetry/exporter-trace-otlp-http` / `-metrics-otlp-http`.
 */
export function startTelemetry(traceExporter: SpanExporter, metricExporter: PushMetricExporter): NodeSDK {
  const sdk = new NodeSDK({
    serviceName: 'payments',
    traceExporter,
    metricReader: new PeriodicExportingMetricReader({ exporter: metricExporter }),
    // Prisma's spans (your resolver's queries; the claim and the completion too, unless the adapter
    // is wrapped by directStatements) nest under the call's span.
    instrumentations: [new PrismaInstrumentation()],
  });
  sdk.start();
  return sdk;
}

/**
 * The library's side: `observe` goes to `idempotency({ …, observe })` (tRPC) or
 * `useIdempotency({ …, observe })` (Envelop / Yoga); the sweeper reports what it deletes.
 */
export function observeIdempotency(prisma: PrismaQueryable) {
  const telemetry = idempotencyTelemetry({
    // The gauge idempotency.records.stuck: IN_PROGRESS records past their lease.
    stuckRecords: async () => (await recordStats(prisma)).stuck,
  });
  const sweeper = startSweeper(prisma, { onSweep: telemetry.onSweep });
  return { observe: telemetry.observe, stop: () => sweeper.stop() };
}
