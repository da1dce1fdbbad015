// Starts the inbox and plays an unreliable provider against it: every message delivered three
// times, two of them at once. Prints what was sent and what was written; exits 1 if any message
// took effect more or less than once.
//
//   npx tsx --conditions=source examples/webhook-inbox/main.ts      (DATABASE_URL to use another database)
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { openDatabase } from '../shared/database.js';
import { isMain } from '../shared/is-main.js';
import { createInbox, type WebhookMessage } from './inbox.js';

export async function runWebhookInbox({ messages = 20, url }: { messages?: number; url?: string } = {}) {
  const prisma = await openDatabase(url);
  const server = createInbox(prisma).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks/acme`;
  const userId = `inbox-${randomUUID()}`;
  const deliver = (message: WebhookMessage) =>
    fetch(endpoint, {
      method: 'POST',
      body: JSON.stringify(message),
      headers: { 'content-type': 'application/json' },
    });
  let deliveries = 0;
  let replays = 0;
  try {
    for (let i = 0; i < messages; i++) {
      const message: WebhookMessage = {
        id: `evt_${randomUUID()}`,
        type: 'payment.succeeded',
        data: { userId, amount: `${i + 1}.00`, currency: 'EUR' },
      };
      const responses = [
        ...(await Promise.all([deliver(message), deliver(message)])),
        await deliver(message),
      ];
      deliveries += responses.length;
      replays += responses.filter((r) => r.headers.get('idempotent-replayed') === 'true').length;
    }
    const payments = await prisma.payment.count({ where: { userId } });
    return { deliveries, replays, payments };
  } finally {
    server.close();
    await prisma.$disconnect();
  }
}

if (isMain(import.meta.url)) {
  const messages = 20;
  const { deliveries, replays, payments } = await runWebhookInbox({ messages });
  console.log(
    `messages: ${messages}, deliveries: ${deliveries}, replayed: ${replays}, payments written: ${payments}`,
  );
  process.exitCode = payments === messages && replays === deliveries - messages ? 0 : 1;
}
