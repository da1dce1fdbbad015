import { expect, it } from 'vitest';
import { runCheckoutScenario } from '../../examples/checkout-steps/main.js';

it('checkout-steps: a server killed mid-checkout is resumed by another, and each step happens once', async () => {
  const tally = await runCheckoutScenario({ url: `file:.tmp/checkout-steps-${process.pid}.db` });
  expect(tally).toMatchObject({ reserved: 1, charged: 1, receipts: 1, killedBy: 'SIGKILL' });
  expect(tally.retries).toEqual([tally.result, tally.result]);
}, 120_000);
