/**
 * idempotent-mutations/opentelemetry: spans and metrics for every idempotent call, on
 * `@opentelemetry/api` (an optional peer dependency; this subpath is the only one importing it).
 */
import { createHash } from 'node:crypto';
import {
  type Attributes,
  context,
  type MeterProvider,
  metrics,
  SpanKind,
  SpanStatusCode,
  type TracerProvider,
  trace,
} from '@opentelemetry/api';
import type { CallObserver, IdempotencyPhase, ObserveCall, ObservedCall } from '../core/observer.js';
import {
  ATTR_ERROR_TYPE,
  ATTR_KEY_HASH,
  ATTR_KEY_SOURCE,
  ATTR_MODE,
  ATTR_OPERATION,
  ATTR_OUTCOME,
  ATTR_SCOPE,
  ATTR_TX_RETRIES,
  METRIC_CALLS,
  METRIC_RESOLVER_DURATION,
  METRIC_RESULT_SIZE,
  METRIC_STUCK_RECORDS,
  METRIC_SWEEP_DELETED,
  METRIC_TX_RETRIES,
  METRIC_WAIT_DURATION,
} from './attributes.js';

export * from './attributes.js';

const INSTRUMENTATION = 'idempotent-mutations';

/** Options of `idempotencyTelemetry`. */
export interface IdempotencyTelemetryOptions {
  /** Where spans go. @default the global tracer provider (`trace.getTracerProvider()`) */
  tracerProvider?: TracerProvider;
  /** Where metrics go. @default the global meter provider (`metrics.getMeterProvider()`) */
  meterProvider?: MeterProvider;
  /**
   * Write `idempotency.scope` on spans. The scope is the principal (a user or tenant id), which
   * may be personal data: off unless you opt in. Never written on metrics (unbounded cardinality).
   * @default false
   */
  recordScope?: boolean;
  /**
   * Reports the number of `IN_PROGRESS` records past their lease as the observable gauge
   * `idempotency.records.stuck`, read at each collection (e.g.
   * `async () => (await recordStats(prisma)).stuck` from `idempotent-mutations/prisma`).
   * @default undefined (no gauge)
   */
  stuckRecords?: () => number | Promise<number>;
}

/** What `idempotencyTelemetry` gives: the hook for `observe`, and the sweeper's. */
export interface IdempotencyTelemetry {
  /** Pass as `observe` to `runIdempotent`, `idempotency()` or `useIdempotency()`. */
  observe: ObserveCall;
  /** Pass as `onSweep` to `startSweeper` (or call with what `sweepExpired` returns). */
  onSweep: (deleted: number) => void;
}

/**
 * Traces and measures idempotent calls. Each call gets a span `idempotency <operation>`, a child
 * of the active span (the tRPC, Yoga or HTTP server instrumentation's) and the parent of the
 * spans the store and the resolver make (Prisma's, your own): the call runs in its context.
 * Span events mark the phases (`idempotency.wait.start` … `idempotency.store.end`), errors set
 * the span's status. With no OpenTelemetry SDK registered, the API's no-op tracer and meter make
 * this nearly free (the key is hashed only for a recording span).
 */
export function idempotencyTelemetry(options: IdempotencyTelemetryOptions = {}): IdempotencyTelemetry {
  const { recordScope = false, stuckRecords } = options;
  const tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(INSTRUMENTATION);
  const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(INSTRUMENTATION);
  const calls = meter.createCounter(METRIC_CALLS, {
    description: 'Idempotent calls, by outcome and mode',
    unit: '{call}',
  });
  const waitDuration = meter.createHistogram(METRIC_WAIT_DURATION, {
    description: 'How long a call waited for a duplicate holding its key',
    unit: 's',
  });
  const resolverDuration = meter.createHistogram(METRIC_RESOLVER_DURATION, {
    description: 'How long the resolver of an idempotent call ran',
    unit: 's',
  });
  const resultSize = meter.createHistogram(METRIC_RESULT_SIZE, {
    description: 'The size of the stored results',
    unit: 'By',
  });
  const txRetries = meter.createCounter(METRIC_TX_RETRIES, {
    description: 'Transactions run again after a write conflict, deadlock or serialization failure',
    unit: '{retry}',
  });
  const sweepDeleted = meter.createCounter(METRIC_SWEEP_DELETED, {
    description: 'Expired records deleted by the sweeper',
    unit: '{record}',
  });
  if (stuckRecords) {
    meter
      .createObservableGauge(METRIC_STUCK_RECORDS, {
        description: 'IN_PROGRESS records whose lease ran out',
        unit: '{record}',
      })
      .addCallback(async (result) => result.observe(await stuckRecords()));
  }

  const observe: ObserveCall = (call) => {
    const common: Attributes = { [ATTR_OPERATION]: call.operation, [ATTR_MODE]: call.mode };
    const parent = context.active();
    const span = tracer.startSpan(
      `idempotency ${call.operation}`,
      { kind: SpanKind.INTERNAL, attributes: common },
      parent,
    );
    if (span.isRecording()) span.setAttributes(identity(call, recordScope));
    const started = new Map<IdempotencyPhase, number>();
    const observer: CallObserver = {
      around: (run) => context.with(trace.setSpan(parent, span), run),
      phaseStart(phase, at) {
        started.set(phase, at);
        span.addEvent(`idempotency.${phase}.start`);
      },
      phaseEnd(phase, at, error) {
        span.addEvent(`idempotency.${phase}.end`, error === undefined ? undefined : errorAttributes(error));
        const since = started.get(phase);
        if (since === undefined) return;
        if (phase === 'wait') waitDuration.record((at - since) / 1000, common);
        else if (phase === 'resolver') resolverDuration.record((at - since) / 1000, common);
      },
      end({ outcome, error, txRetries: retries, resultBytes }) {
        const attributes: Attributes = { ...common };
        if (outcome !== undefined) attributes[ATTR_OUTCOME] = outcome;
        if (error !== undefined) Object.assign(attributes, errorAttributes(error));
        calls.add(1, attributes);
        if (retries > 0) txRetries.add(retries, common);
        if (resultBytes !== undefined) resultSize.record(resultBytes, common);
        if (span.isRecording()) {
          span.setAttributes({ ...attributes, [ATTR_TX_RETRIES]: retries });
          if (error !== undefined) {
            if (error instanceof Error) span.recordException(error);
            span.setStatus({ code: SpanStatusCode.ERROR, message: messageOf(error) });
          }
        }
        span.end();
      },
    };
    return observer;
  };

  return { observe, onSweep: (deleted) => sweepDeleted.add(deleted) };
}

/** The attributes that identify a call, for a recording span only (the hash has a cost). */
function identity(call: ObservedCall, recordScope: boolean): Attributes {
  const attributes: Attributes = {
    [ATTR_KEY_HASH]: createHash('sha256').update(call.key).digest('hex'),
  };
  if (call.keySource !== undefined) attributes[ATTR_KEY_SOURCE] = call.keySource;
  if (recordScope) attributes[ATTR_SCOPE] = call.scope;
  return attributes;
}

/** `error.type`: an idempotency error's `code` (e.g. `IDEMPOTENCY_KEY_MISMATCH`), else the error's name. */
function errorAttributes(error: unknown): Attributes {
  const { code, name } = (error ?? {}) as { code?: unknown; name?: unknown };
  const type = typeof code === 'string' ? code : typeof name === 'string' ? name : '_OTHER';
  return { [ATTR_ERROR_TYPE]: type };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
