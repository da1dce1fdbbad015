// The OpenTelemetry observer's cost on a fresh key: scenarios and their measurement, shared by
// `npm run bench` (one line of its report, with the ≤ 2 % target) and `npm run bench:observer`.
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { memoryStore, type RunIdempotentOptions, runIdempotent } from 'idempotent-mutations';
import { idempotencyTelemetry } from 'idempotent-mutations/opentelemetry';
import { interleave, median, quantile, type Scenario } from './stats.js';

export const observerScenarios = [
  'unobserved',
  'unobserved (A/A)',
  'observed, no SDK',
  'observed, SDK recording',
] as const;
export type ObserverScenario = (typeof observerScenarios)[number];

/** One scenario's figures: per call, and its ratio to the unobserved run of the same rounds. */
export interface ObserverFigures {
  medianUs: number;
  p90Us: number;
  /** The median of each round's ratio to the unobserved run of that round (paired: same load). */
  ratio: number;
}

/**
 * Runs `calls` fresh keys on the memory store per scenario and round, the scenarios interleaved.
 * No SDK is registered globally, so `observed, no SDK` sees the API's no-op tracer and meter.
 */
export async function measureObserverOverhead({
  rounds,
  warmup,
  calls,
}: {
  rounds: number;
  warmup: number;
  calls: number;
}): Promise<Record<ObserverScenario, ObserverFigures>> {
  const noSdk = idempotencyTelemetry();
  const exporter = new InMemorySpanExporter();
  const recording = idempotencyTelemetry({
    tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
  });
  let sequence = 0;
  /** `calls` fresh keys in a row, each run on a store of its own so records never pile up. */
  const freshKeys =
    (observe: RunIdempotentOptions['observe']): Scenario =>
    async () => {
      const store = memoryStore();
      for (let i = 0; i < calls; i++) {
        await runIdempotent(
          {
            store,
            scope: 'user-1',
            key: `key-${sequence++}`,
            operation: 'payments.create',
            input: { amount: i },
            observe,
          },
          async () => ({ id: i, status: 'paid' }),
        );
      }
      exporter.reset();
    };
  const scenarios: Record<ObserverScenario, Scenario> = {
    unobserved: freshKeys(undefined),
    'unobserved (A/A)': freshKeys(undefined),
    'observed, no SDK': freshKeys(noSdk.observe),
    'observed, SDK recording': freshKeys(recording.observe),
  };
  const samples = (await interleave(scenarios, { warmup, rounds })) as Record<ObserverScenario, number[]>;
  const base = samples.unobserved;
  const toUs = (ms: number) => (ms / calls) * 1000;
  const figures = (own: number[]): ObserverFigures => ({
    medianUs: toUs(median(own)),
    p90Us: toUs(quantile(own, 0.9)),
    ratio: median(own.map((ms, round) => ms / base[round]!)),
  });
  return Object.fromEntries(observerScenarios.map((name) => [name, figures(samples[name])])) as Record<
    ObserverScenario,
    ObserverFigures
  >;
}
