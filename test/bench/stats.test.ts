import { describe, expect, it } from 'vitest';
import { burst, interleave, median, orderOf, p99, quantile } from '../../bench/stats.js';

const range = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe('median', () => {
  it('is the middle sample of an odd count, whatever the order', () => {
    expect(median([9, 1, 5])).toBe(5);
    expect(median([3])).toBe(3);
  });

  it('is the mean of the two middle samples of an even count', () => {
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([10, 20])).toBe(15);
  });

  it('leaves the samples as they were', () => {
    const samples = [3, 1, 2];
    median(samples);
    expect(samples).toEqual([3, 1, 2]);
  });

  it('refuses an empty list', () => {
    expect(() => median([])).toThrow(RangeError);
  });
});

describe('quantile and p99', () => {
  it('p99 of 1..100 is 99 and of 1..1000 is 990 (nearest rank)', () => {
    expect(p99(range(100).reverse())).toBe(99);
    expect(p99(range(1000))).toBe(990);
  });

  it('p99 of fewer than 100 samples is the largest', () => {
    expect(p99([5, 1, 7, 3])).toBe(7);
    expect(p99(range(99))).toBe(99);
  });

  it('quantile 0 is the smallest sample and 1 the largest', () => {
    expect(quantile([4, 2, 8], 0)).toBe(2);
    expect(quantile([4, 2, 8], 1)).toBe(8);
  });

  it('quantile 0.5 is a sample at or above half of them', () => {
    expect(quantile(range(10), 0.5)).toBe(5);
    expect(quantile(range(11), 0.5)).toBe(6);
  });

  it.each([[-0.1], [1.1], [Number.NaN]])('refuses quantile %s', (q) => {
    expect(() => quantile([1], q)).toThrow(RangeError);
  });
});

describe('orderOf', () => {
  const names = ['a', 'b', 'c', 'd'];

  it('starts with the names as given and rotates by one each round', () => {
    expect(orderOf(names, 0)).toEqual(['a', 'b', 'c', 'd']);
    expect(orderOf(names, 1)).toEqual(['b', 'c', 'd', 'a']);
    expect(orderOf(names, 3)).toEqual(['d', 'a', 'b', 'c']);
  });

  it('runs the rotations backwards on every other pass', () => {
    expect(orderOf(names, 4)).toEqual(['d', 'c', 'b', 'a']);
    expect(orderOf(names, 5)).toEqual(['a', 'd', 'c', 'b']);
    expect(orderOf(names, 8)).toEqual(['a', 'b', 'c', 'd']);
  });

  it('puts every name twice in every position over 2·n rounds', () => {
    const counts = names.map(() => new Map<string, number>());
    for (let round = 0; round < 2 * names.length; round++) {
      orderOf(names, round).forEach((name, position) => {
        counts[position]!.set(name, (counts[position]!.get(name) ?? 0) + 1);
      });
    }
    for (const position of counts) {
      expect(Object.fromEntries(position)).toEqual({ a: 2, b: 2, c: 2, d: 2 });
    }
  });

  it('runs each name before and after each of its neighbours equally often over 2·n rounds', () => {
    const before = new Map<string, number>();
    for (let round = 0; round < 2 * names.length; round++) {
      const order = orderOf(names, round);
      for (let i = 1; i < order.length; i++) {
        const pair = `${order[i - 1]}${order[i]}`;
        before.set(pair, (before.get(pair) ?? 0) + 1);
      }
    }
    for (const [pair, count] of before) {
      expect(before.get(`${pair[1]}${pair[0]}`), pair).toBe(count);
    }
  });
});

/** A clock that moves only when told: each scenario advances it by its own fixed duration. */
function fakeClock() {
  let now = 0;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

describe('interleave', () => {
  it('runs each scenario once per round in orderOf order and records only the rounds after the warm-up', async () => {
    const clock = fakeClock();
    const ran: string[] = [];
    let round = 0;
    const scenario = (name: string, ms: number) => async () => {
      ran.push(name);
      // The duration tells which round a sample came from.
      clock.advance(ms + round);
      if (ran.length % 3 === 0) round++;
    };
    const samples = await interleave(
      { x: scenario('x', 100), y: scenario('y', 200), z: scenario('z', 300) },
      { warmup: 2, rounds: 4, now: clock.now },
    );

    const expected = Array.from({ length: 6 }, (_, r) => orderOf(['x', 'y', 'z'], r)).flat();
    expect(ran).toEqual(expected);
    expect(samples).toEqual({
      x: [102, 103, 104, 105],
      y: [202, 203, 204, 205],
      z: [302, 303, 304, 305],
    });
  });
});

describe('burst', () => {
  it('runs every call once, never more at a time than the concurrency, and reports calls per second', async () => {
    const clock = fakeClock();
    let running = 0;
    let most = 0;
    const seen: number[] = [];
    const result = await burst(
      async (index) => {
        seen.push(index);
        running++;
        most = Math.max(most, running);
        await new Promise((resolve) => setImmediate(resolve));
        clock.advance(10);
        running--;
      },
      { calls: 20, concurrency: 4, now: clock.now },
    );

    expect(seen.sort((a, b) => a - b)).toEqual(range(20).map((i) => i - 1));
    expect(most).toBe(4);
    expect(result.latencies).toHaveLength(20);
    // 20 calls, each moving the shared clock by 10 ms: 200 ms in all.
    expect(result.ms).toBe(200);
    expect(result.perSecond).toBe(100);
  });
});
