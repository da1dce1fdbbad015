import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  type DataPoint,
  MeterProvider,
  MetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { type IdempotencyTelemetryOptions, idempotencyTelemetry } from '../../src/opentelemetry/index.js';

/** A metric reader the test collects from when it chooses (the SDK's in-memory reader pattern). */
class CollectingReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

let contextManager: AsyncLocalStorageContextManager | undefined;

/**
 * An OpenTelemetry SDK with an in-memory span exporter and metric reader, the global
 * AsyncLocalStorage context manager (what the Node SDK registers), and the telemetry under test.
 */
export function telemetryHarness(options: IdempotencyTelemetryOptions = {}) {
  if (!contextManager) {
    contextManager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(contextManager);
  }
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const reader = new CollectingReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const telemetry = idempotencyTelemetry({ tracerProvider, meterProvider, ...options });
  return {
    tracerProvider,
    meterProvider,
    telemetry,
    /** The test's own tracer, for request and resolver spans. */
    tracer: tracerProvider.getTracer('test'),
    /** Finished spans, in the order they ended. */
    spans: (): ReadableSpan[] => exporter.getFinishedSpans(),
    /** The span named `name` (exactly one must exist). */
    span(name: string): ReadableSpan {
      const found = exporter.getFinishedSpans().filter((span) => span.name === name);
      if (found.length !== 1) throw new Error(`${found.length} spans named ${name}`);
      return found[0]!;
    },
    /** The data points of the metric `name`, as last collected. */
    async points(name: string): Promise<DataPoint<unknown>[]> {
      const { resourceMetrics } = await reader.collect();
      for (const scope of resourceMetrics.scopeMetrics) {
        for (const metric of scope.metrics) {
          if (metric.descriptor.name === name) return metric.dataPoints as DataPoint<unknown>[];
        }
      }
      return [];
    },
  };
}

/** Whether `child` is a direct child of `parent`. */
export function isChildOf(child: ReadableSpan, parent: ReadableSpan): boolean {
  return (
    child.parentSpanContext?.spanId === parent.spanContext().spanId &&
    child.spanContext().traceId === parent.spanContext().traceId
  );
}
