import { expect, it } from 'vitest';
import { runWebhookInbox } from '../../examples/webhook-inbox/main.js';

it('the webhook inbox applies each message once however often it is delivered', async () => {
  const { deliveries, replays, payments } = await runWebhookInbox({
    messages: 10,
    url: `file:.tmp/webhook-inbox-${process.pid}.db`,
  });
  expect(deliveries).toBe(30);
  expect(payments).toBe(10);
  expect(replays).toBe(20);
});
