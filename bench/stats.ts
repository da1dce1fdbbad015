// The statistics the benchmark reports, and the order it runs scenarios in. Kept apart from the
// timing code so that test/bench/stats.test.ts can check them without a clock.

/** The q-quantile by the nearest-rank method: the smallest sample with at least q of them at or below it. */
export function quantile(samples: readonly number[], q: number): number {
  if (samples.length === 0) throw new RangeError('quantile of no samples');
  if (!(q >= 0 && q <= 1)) throw new RangeError(`quantile ${q} is not between 0 and 1`);
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]!;
}

/** The middle sample; the mean of the two middle ones when the count is even. */
export function median(samples: readonly number[]): number {
  if (samples.length === 0) throw new RangeError('median of no samples');
  const sorted = [...samples].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** The 99th percentile (nearest rank): with fewer than 100 samples, the largest. */
export function p99(samples: readonly number[]): number {
  return quantile(samples, 0.99);
}

/**
 * The order scenarios run in during `round`: rotated by one each round, and reversed on every other
 * pass through all n rotations. Over 2·n rounds each scenario runs twice in every position, once
 * before and once after each neighbour, so neither a place in the round (a connection just warmed,
 * a garbage collection left behind) nor a neighbour favours one scenario.
 */
export function orderOf<T>(names: readonly T[], round: number): T[] {
  const n = names.length;
  const shift = round % n;
  const rotated = [...names.slice(shift), ...names.slice(0, shift)];
  return Math.floor(round / n) % 2 === 1 ? rotated.reverse() : rotated;
}

/** A scenario: one call, awaited. */
export type Scenario = () => Promise<unknown>;

/** Options of `interleave`. */
export interface InterleaveOptions {
  /** Rounds run first and not recorded. */
  warmup: number;
  /** Rounds recorded. */
  rounds: number;
  /** The clock, in ms. @default performance.now */
  now?: () => number;
}

/**
 * Runs every scenario once per round, in the order `orderOf` gives, and returns each one's
 * durations (ms) from the recorded rounds. Scenarios measured in the same rounds feel the same
 * drift in the machine's load, which is what makes their ratios meaningful on a busy machine.
 */
export async function interleave(
  scenarios: Readonly<Record<string, Scenario>>,
  { warmup, rounds, now = () => performance.now() }: InterleaveOptions,
): Promise<Record<string, number[]>> {
  const names = Object.keys(scenarios);
  const samples: Record<string, number[]> = Object.fromEntries(names.map((name) => [name, []]));
  for (let round = 0; round < warmup + rounds; round++) {
    for (const name of orderOf(names, round)) {
      const started = now();
      await scenarios[name]!();
      const elapsed = now() - started;
      if (round >= warmup) samples[name]!.push(elapsed);
    }
  }
  return samples;
}

/** What one run of `calls` calls at a given concurrency took. */
export interface Burst {
  /** Wall time of the whole burst, ms. */
  ms: number;
  /** Calls per second over the burst. */
  perSecond: number;
  /** Each call's own duration, ms. */
  latencies: number[];
}

/** Runs `calls` calls of `call`, at most `concurrency` at a time, and times them. */
export async function burst(
  call: (index: number) => Promise<unknown>,
  {
    calls,
    concurrency,
    now = () => performance.now(),
  }: { calls: number; concurrency: number; now?: () => number },
): Promise<Burst> {
  const latencies: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < calls) {
      const index = next++;
      const started = now();
      await call(index);
      latencies.push(now() - started);
    }
  };
  const started = now();
  await Promise.all(Array.from({ length: Math.min(concurrency, calls) }, worker));
  const ms = now() - started;
  return { ms, perSecond: (calls / ms) * 1000, latencies };
}
