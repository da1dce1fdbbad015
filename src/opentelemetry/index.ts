/**
 * idempotent-mutations/opentelemetry: spans and metrics for every idempotent call, on
 * `@opentelemetry/api` (an optional peer dependency; this subpath is the only one importing it).
 */
import { createHash } from 'node:crypto';
import {
  type Attributes,
  type Context,
  type Counter,
  context,
  createNoopMeter,
  type Histogram,
  INVALID_SPANID,
  type Meter,
  type MeterProvider,
  metrics,
  ProxyTracerProvider,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TracerProvider,
  trace,
} from '@opentelemetry/api';
import { isIdempotencyError } from '../core/errors.js';
import type {
  CallObserver,
  IdempotencyPhase,
  ObserveCall,
  ObservedCall,
  ObservedStep,
} from '../core/observer.js';
import {
  ATTR_ERROR_TYPE,
  ATTR_FIRST_ATTEMPT,
  ATTR_KEY_HASH,
  ATTR_KEY_SOURCE,
  ATTR_MODE,
  ATTR_OPERATION,
  ATTR_OUTCOME,
  ATTR_SCOPE,
  ATTR_STEP_NAME,
  ATTR_STEP_POSITION,
  ATTR_STEP_REPLAYED,
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
  tracerProvider?: TracerProvider | undefined;
  /** Where metrics go. @default the global meter provider (`metrics.getMeterProvider()`) */
  meterProvider?: MeterProvider | undefined;
  /**
   * Write `idempotency.scope` on spans. The scope is the principal (a user or tenant id), which
   * may be personal data: off unless you opt in. Never written on metrics (unbounded cardinality).
   * @default false
   */
  recordScope?: boolean | undefined;
  /**
   * Reports the number of `IN_PROGRESS` records past their lease as the observable gauge
   * `idempotency.records.stuck`, read at each collection (e.g.
   * `async () => (await recordStats(prisma)).stuck` from `idempotent-mutations/prisma`).
   * @default undefined (no gauge)
   */
  stuckRecords?: (() => number | Promise<number>) | undefined;
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
 * the span's status. Each step of a lease-mode call (`step(name, fn)`) gets a span
 * `idempotency step <name>`, the parent of the spans its `fn` makes. With no OpenTelemetry SDK
 * registered (neither a tracer nor a meter provider), `observe` returns `undefined` and calls run
 * as if it were unset; the key is hashed only for a recording span.
 */
export function idempotencyTelemetry(options: IdempotencyTelemetryOptions = {}): IdempotencyTelemetry {
  const { recordScope = false, tracerProvider } = options;
  const tracer = (tracerProvider ?? trace.getTracerProvider()).getTracer(INSTRUMENTATION);
  const instruments = instrumentsOf(options);
  // The stuck-records gauge is observed at each collection, traffic or not (a server restarting
  // after a crash has stuck records and no calls yet): register it now, where a provider is there
  // (given, or registered globally before this call); otherwise at the first call or sweep.
  if (options.stuckRecords) instruments();

  const observe: ObserveCall = (call) => {
    const measure = instruments();
    // No SDK registered: nothing to observe, and the call runs exactly as if `observe` were unset.
    if (measure.noop && tracingIsOff(tracerProvider)) return undefined;
    const parent = context.active();
    const common: Attributes = { [ATTR_OPERATION]: call.operation, [ATTR_MODE]: call.mode };
    const span = tracer.startSpan(
      `idempotency ${call.operation}`,
      { kind: SpanKind.INTERNAL, attributes: common },
      parent,
    );
    // A no-op tracer hands back the parent's context; an SDK makes a span of its own, sampled or not.
    const traced = span.isRecording() || span.spanContext().spanId !== spanIdOf(parent);
    const recording = span.isRecording();
    if (recording) span.setAttributes(identity(call, recordScope));
    const started: Partial<Record<IdempotencyPhase, number>> = {};
    const observer: CallObserver = {
      phaseStart(phase, at) {
        started[phase] = at;
        if (recording) span.addEvent(`idempotency.${phase}.start`);
      },
      phaseEnd(phase, at, error) {
        if (recording) {
          span.addEvent(`idempotency.${phase}.end`, error === undefined ? undefined : errorAttributes(error));
        }
        const since = started[phase];
        if (since === undefined) return;
        if (phase === 'wait') measure.waitDuration.record((at - since) / 1000, common);
        else if (phase === 'resolver') measure.resolverDuration.record((at - since) / 1000, common);
      },
      end({ outcome, failed, error, txRetries, resultBytes }) {
        try {
          const attributes: Attributes = { ...common };
          if (outcome !== undefined) attributes[ATTR_OUTCOME] = outcome;
          if (failed) Object.assign(attributes, errorAttributes(error));
          measure.calls.add(1, attributes);
          if (txRetries > 0) measure.txRetries.add(txRetries, common);
          if (resultBytes !== undefined) measure.resultSize.record(resultBytes, common);
          if (recording) {
            span.setAttributes({ ...attributes, [ATTR_TX_RETRIES]: txRetries });
            if (failed) recordError(span, error);
          }
        } finally {
          // Whatever recording met, the span is ended: an open span is never exported.
          span.end();
        }
      },
    };
    // The store's and the resolver's spans become the call span's children.
    if (traced) {
      observer.around = (run) => context.with(trace.setSpan(parent, span), run);
      observer.step = traceStep;
    }
    return observer;

    /** A step's span, a child of the active one (the call's, or a span the resolver opened). */
    async function traceStep<R>(step: ObservedStep, run: () => Promise<R>): Promise<R> {
      const attributes = {
        ...common,
        [ATTR_STEP_NAME]: step.name,
        [ATTR_STEP_POSITION]: step.position,
        [ATTR_STEP_REPLAYED]: step.replayed,
      };
      const active = context.active();
      const stepSpan = tracer.startSpan(`idempotency step ${step.name}`, { attributes }, active);
      try {
        return await context.with(trace.setSpan(active, stepSpan), run);
      } catch (error) {
        if (stepSpan.isRecording()) {
          stepSpan.setAttributes(errorAttributes(error));
          recordError(stepSpan, error);
        }
        throw error;
      } finally {
        stepSpan.end();
      }
    }
  };

  return { observe, onSweep: (deleted) => instruments().sweepDeleted.add(deleted) };
}

/** The metric instruments, and whether they are the API's no-op ones. */
interface Instruments {
  noop: boolean;
  calls: Counter;
  waitDuration: Histogram;
  resolverDuration: Histogram;
  resultSize: Histogram;
  txRetries: Counter;
  sweepDeleted: Counter;
}

const NoopCounter = createNoopMeter().createCounter('noop').constructor;

/**
 * The instruments, made on first use. The metrics API has no proxy: a meter taken before the SDK
 * registered its provider stays a no-op for ever, so while ours is one and no provider was given,
 * the global provider is looked up again.
 */
function instrumentsOf(options: IdempotencyTelemetryOptions): () => Instruments {
  let provider: MeterProvider | undefined;
  let current: Instruments | undefined;
  return () => {
    if (current && (!current.noop || options.meterProvider)) return current;
    const now = options.meterProvider ?? metrics.getMeterProvider();
    if (current && now === provider) return current;
    provider = now;
    current = createInstruments(now.getMeter(INSTRUMENTATION), options.stuckRecords);
    return current;
  };
}

function createInstruments(
  meter: Meter,
  stuckRecords: IdempotencyTelemetryOptions['stuckRecords'],
): Instruments {
  const calls = meter.createCounter(METRIC_CALLS, {
    description: 'Idempotent calls, by outcome and mode',
    unit: '{call}',
  });
  if (stuckRecords) {
    meter
      .createObservableGauge(METRIC_STUCK_RECORDS, {
        description: 'IN_PROGRESS records whose lease ran out',
        unit: '{record}',
      })
      .addCallback(async (result) => result.observe(await stuckRecords()));
  }
  return {
    noop: calls.constructor === NoopCounter,
    calls,
    waitDuration: meter.createHistogram(METRIC_WAIT_DURATION, {
      description: 'How long a call waited for a duplicate holding its key',
      unit: 's',
    }),
    resolverDuration: meter.createHistogram(METRIC_RESOLVER_DURATION, {
      description: 'How long the resolver of an idempotent call ran',
      unit: 's',
    }),
    resultSize: meter.createHistogram(METRIC_RESULT_SIZE, {
      description: 'The size of the stored results',
      unit: 'By',
    }),
    txRetries: meter.createCounter(METRIC_TX_RETRIES, {
      description: 'Transactions run again after a write conflict, deadlock or serialization failure',
      unit: '{retry}',
    }),
    sweepDeleted: meter.createCounter(METRIC_SWEEP_DELETED, {
      description: 'Expired records deleted by the sweeper',
      unit: '{record}',
    }),
  };
}

const NOOP_TRACER_PROVIDER = new ProxyTracerProvider().getDelegate();

/** Whether spans go nowhere: no provider given, and none registered globally (yet). */
function tracingIsOff(given: TracerProvider | undefined): boolean {
  const provider = given ?? trace.getTracerProvider();
  return provider instanceof ProxyTracerProvider && provider.getDelegate() === NOOP_TRACER_PROVIDER;
}

function spanIdOf(parent: Context): string {
  return trace.getSpanContext(parent)?.spanId ?? INVALID_SPANID;
}

/** The attributes that identify a call, for a recording span only (the hash has a cost). */
function identity(call: ObservedCall, recordScope: boolean): Attributes {
  const attributes: Attributes = {
    [ATTR_KEY_HASH]: createHash('sha256').update(call.key).digest('hex'),
  };
  if (call.firstAttempt) attributes[ATTR_FIRST_ATTEMPT] = true;
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

/** A thrown value's message; never throws, whatever was thrown (`String` does, for some objects). */
function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  try {
    return String(error);
  } catch {
    return Object.prototype.toString.call(error);
  }
}

/**
 * The exception and the `ERROR` status. This library's own errors are recorded by name and code
 * only: some messages name the scope and the raw key (a record that came back for another key,
 * a claim that cannot be read back), which a span must not carry without `recordScope`.
 */
function recordError(span: Span, error: unknown): void {
  if (isIdempotencyError(error)) {
    // No `code` member: the SDK would make it `exception.type`, and the name would be lost.
    span.recordException({ name: error.name, message: error.code });
    span.setStatus({ code: SpanStatusCode.ERROR, message: error.code });
    return;
  }
  if (error instanceof Error) span.recordException(error);
  span.setStatus({ code: SpanStatusCode.ERROR, message: messageOf(error) });
}
