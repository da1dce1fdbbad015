import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { createTRPCClient, httpLink } from '@trpc/client';
import { idempotencyHeaders, idempotencyLink } from 'idempotent-mutations/client';
import { type AppRouter, createServer, prisma } from './app.js';

const userId = `user-${randomUUID()}`;
const server = createServer().listen(0);
const { port } = server.address() as AddressInfo;
const client = createTRPCClient<AppRouter>({
  links: [
    idempotencyLink(), // one key per mutation, kept across its retries
    httpLink({
      url: `http://127.0.0.1:${port}`,
      headers: ({ op }) => ({ ...idempotencyHeaders({ op }), 'x-user-id': userId }),
    }),
  ],
});

// The same key twice, as a client retrying after a lost response would send it.
const idempotencyKey = randomUUID();
const first = await client.createPayment.mutate({ amount: '12.50' }, { context: { idempotencyKey } });
const retry = await client.createPayment.mutate({ amount: '12.50' }, { context: { idempotencyKey } });
const payments = await prisma.payment.count({ where: { userId } });
console.log({ first, retry, payments });

server.close();
await prisma.$disconnect();
if (retry.id !== first.id || payments !== 1) throw new Error('the retry was not replayed');
console.log('replayed: one payment for two calls');
