import { expect, it } from 'vitest';
import { exactlyOnce, runDemo } from '../../examples/demo.js';

it('the demo drives both examples through the flaky proxy and every mutation happens once', async () => {
  const { trpc, yoga } = await runDemo(`file:.tmp/demo-${process.pid}.db`);
  for (const tally of [trpc, yoga]) {
    expect(tally.rows).toBe(3);
    expect(tally.runs).toBe(3);
    expect(tally.lostResponses).toBe(1);
    // The lost response and the double submit each end in a replay.
    expect(tally.replays).toBe(2);
    expect(tally.rejections).toEqual({ IDEMPOTENCY_KEY_MISMATCH: 1 });
    expect(exactlyOnce(tally)).toBe(true);
  }
  // tRPC: 1 lost + 1 retry, 2 double-submits, 1 503 + 1 retry, 1 mismatch.
  expect(trpc.attempts).toBe(7);
});
