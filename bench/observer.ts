// What `observe: idempotencyTelemetry().observe` costs on a fresh key when no OpenTelemetry SDK is
// registered (the API's no-op tracer and meter): fresh-key calls on the memory store, with and
// without the observer, interleaved side by side in one run (see `interleave`). A second copy of
// the unobserved scenario gives the noise floor (an A/A ratio); a third scenario, with an SDK
// recording into memory, is shown for scale. `npm run bench` reports the same ratio in one line.
//
//   npm run bench:observer                 about 30 s on 2 cores
//   npm run bench:observer -- --rounds 800 --calls 100
import os from 'node:os';
import { parseArgs } from 'node:util';
import { measureObserverOverhead, observerScenarios } from './observer-overhead.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '400' },
    warmup: { type: 'string', default: '30' },
    calls: { type: 'string', default: '200' },
  },
});
const rounds = Number(args.rounds);
const calls = Number(args.calls);

const load = os.loadavg()[0]!.toFixed(2);
const figures = await measureObserverOverhead({ rounds, warmup: Number(args.warmup), calls });
const us = (value: number) => `${value.toFixed(2)} µs`;
console.log(
  `fresh keys on the memory store: ${rounds} rounds × ${calls} calls per scenario, load average ${load}`,
);
console.log('scenario                    median/call  p90/call     ratio to unobserved (median of rounds)');
for (const name of observerScenarios) {
  const { medianUs, p90Us, ratio } = figures[name];
  console.log(`${name.padEnd(27)} ${us(medianUs).padEnd(12)} ${us(p90Us).padEnd(12)} ${ratio.toFixed(3)}`);
}
console.log(`load average after: ${os.loadavg()[0]!.toFixed(2)}`);
