import { expect, it } from 'vitest';
import { openDatabase } from '../../examples/shared/database.js';
import { createInbox } from '../../examples/webhook-inbox/inbox.js';
import { runWebhookInbox } from '../../examples/webhook-inbox/main.js';
import { listen } from '../helpers/listen.js';

it('the webhook inbox applies each message once however often it is delivered', async () => {
  const { deliveries, replays, payments } = await runWebhookInbox({
    messages: 10,
    url: `file:.tmp/webhook-inbox-${process.pid}.db`,
  });
  expect(deliveries).toBe(30);
  expect(payments).toBe(10);
  expect(replays).toBe(20);
});

it('answers a delivery whose body is not JSON with 400, and goes on serving', async () => {
  const prisma = await openDatabase(`file:.tmp/webhook-inbox-invalid-${process.pid}.db`);
  const { url, close } = await listen(createInbox(prisma));
  try {
    const post = (body: string) =>
      fetch(`${url}/webhooks/acme`, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json' },
      });
    const invalid = await post('{"id": "evt_1", truncated');
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toEqual({ error: 'INVALID_JSON' });
    const valid = await post(
      JSON.stringify({
        id: 'evt_2',
        type: 'payment.succeeded',
        data: { userId: 'u', amount: '1.00', currency: 'EUR' },
      }),
    );
    expect(valid.status).toBe(200);
  } finally {
    await close();
    await prisma.$disconnect();
  }
});
