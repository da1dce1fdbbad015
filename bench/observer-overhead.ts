// What `observe: idempotencyTelemetry().observe` costs on a fresh key when no OpenTelemetry SDK is
// registered (the API's no-op tracer and meter): fresh-key calls on the memory store, with and
// without the observer, interleaved side by side in one run (see `interleave`). A second copy of
// the unobserved scenario gives the noise floor (an A/A ratio); a third scenario, with an SDK
// recording into memory, is shown for scale.
//
//   npm run bench:observer                 about 30 s on 2 cores
//   npm run bench:observer -- --rounds 800 --calls 100
import os from 'node:os';
import { parseArgs } from 'node:util';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { memoryStore, type RunIdempotentOptions, runIdempotent } from 'idempotent-mutations';
import { idempotencyTelemetry } from 'idempotent-mutations/opentelemetry';
import { interleave, median, quantile, type Scenario } from './stats.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '400' },
    warmup: { type: 'string', default: '30' },
    calls: { type: 'string', default: '200' },
  },
});
const rounds = Number(args.rounds);
const warmup = Number(args.warmup);
const calls = Number(args.calls);

const scenarioNames = [
  'unobserved',
  'unobserved (A/A)',
  'observed, no SDK',
  'observed, SDK recording',
] as const;
type ScenarioName = (typeof scenarioNames)[number];

// No SDK is registered: the global providers are the API's no-op ones.
const noSdk = idempotencyTelemetry();
const exporter = new InMemorySpanExporter();
const recording = idempotencyTelemetry({
  tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
});

let sequence = 0;
/** `calls` fresh keys in a row, each its own store so the records never pile up. */
function freshKeys(observe: RunIdempotentOptions['observe']): Scenario {
  return async () => {
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
}

const scenarios: Record<ScenarioName, Scenario> = {
  unobserved: freshKeys(undefined),
  'unobserved (A/A)': freshKeys(undefined),
  'observed, no SDK': freshKeys(noSdk.observe),
  'observed, SDK recording': freshKeys(recording.observe),
};

const load = os.loadavg()[0]!.toFixed(2);
const samples = (await interleave(scenarios, { warmup, rounds })) as Record<ScenarioName, number[]>;
const base = samples.unobserved;
/** The median of each round's ratio to the unobserved run of the same round (paired: same load). */
const pairedRatio = (name: ScenarioName) => median(samples[name].map((ms, round) => ms / base[round]!));
const perCall = (ms: number) => `${((ms / calls) * 1000).toFixed(2)} µs`;
console.log(
  `fresh keys on the memory store: ${rounds} rounds × ${calls} calls per scenario, load average ${load}`,
);
console.log('scenario                    median/call  p90/call     ratio to unobserved (median of rounds)');
for (const name of scenarioNames) {
  const own = samples[name];
  console.log(
    `${name.padEnd(27)} ${perCall(median(own)).padEnd(12)} ${perCall(quantile(own, 0.9)).padEnd(12)} ${pairedRatio(name).toFixed(3)}`,
  );
}
console.log(`load average after: ${os.loadavg()[0]!.toFixed(2)}`);
