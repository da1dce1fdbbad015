// An at-least-once consumer made exactly-once: the inbox pattern. A webhook provider (or a queue)
// may deliver the same message twice, or twice at once; each message id is a key, scoped to the
// subscriber, and the effect (a payment row) commits in the same transaction as the record.
import { createServer, type Server } from 'node:http';
import { Decimal } from '@prisma/client/runtime/client';
import { isIdempotencyError, runIdempotent } from 'idempotent-mutations';
import { prismaStore } from 'idempotent-mutations/prisma';
import type { ExamplePrismaClient } from '../shared/database.js';

/** What the provider sends: POST /webhooks/<subscriber> with this JSON body. */
export interface WebhookMessage {
  id: string;
  type: 'payment.succeeded';
  data: { userId: string; amount: string; currency: string };
}

export function createInbox(prisma: ExamplePrismaClient): Server {
  const store = prismaStore(prisma);
  return createServer(async (req, res) => {
    const subscriber = /^\/webhooks\/([\w-]+)$/.exec(req.url ?? '')?.[1];
    if (req.method !== 'POST' || !subscriber) return void res.writeHead(404).end();
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    let message: WebhookMessage;
    try {
      message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as WebhookMessage;
    } catch {
      // A body that is not JSON will not become JSON on redelivery: 400, never delivered again.
      res.writeHead(400, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ error: 'INVALID_JSON' }));
    }
    try {
      const { value, replayed } = await runIdempotent(
        {
          store,
          scope: subscriber,
          key: message.id,
          operation: `webhook.${message.type}`,
          input: message.data,
        },
        async (tx) => {
          const payment = await tx.payment.create({
            data: {
              userId: message.data.userId,
              amount: new Decimal(message.data.amount),
              currency: message.data.currency,
            },
          });
          return { paymentId: payment.id };
        },
      );
      res.writeHead(200, { 'content-type': 'application/json', 'idempotent-replayed': String(replayed) });
      res.end(JSON.stringify(value));
    } catch (error) {
      // 409 (still running) and 503 tell the provider to deliver again later; 422 never to.
      const status = isIdempotencyError(error) ? error.status : 500;
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: isIdempotencyError(error) ? error.code : 'INTERNAL' }));
    }
  });
}
