import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../examples/shared/database.js';
import { startFaultProxy } from '../../examples/shared/fault-proxy.js';
import { createServer as createPaymentsServer } from '../../examples/trpc-payments/app.js';
import { createPaymentsClient } from '../../examples/trpc-payments/client.js';
import { createOrderServer } from '../../examples/yoga-orders/app.js';
import { createOrder } from '../../examples/yoga-orders/client.js';
import { uniqueScope } from '../helpers/databases.js';

const run = promisify(execFile);
const prisma = await openDatabase(`file:.tmp/example-clients-${process.pid}.db`);
const servers: Server[] = [];
afterAll(async () => {
  for (const server of servers) server.close();
  await prisma.$disconnect();
});

async function listen(server: Server): Promise<string> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('the example clients against the example servers', () => {
  let paymentsUrl: string;
  let ordersUrl: string;
  beforeAll(async () => {
    paymentsUrl = await listen(createPaymentsServer(prisma));
    ordersUrl = await listen(createServer(createOrderServer(prisma)));
  });

  it('trpc-payments: a response lost on the way back is retried with its key and pays once', async () => {
    const proxy = await startFaultProxy(paymentsUrl);
    try {
      const user = uniqueScope();
      proxy.plan('lose-response');
      const payment = await createPaymentsClient(proxy.url, user).createPayment.mutate({
        amount: '12.50',
        currency: 'EUR',
      });
      expect(payment.amount.toString()).toBe('12.5');
      expect(proxy.requests).toHaveLength(2);
      expect(proxy.requests[1]!.headers['idempotency-key']).toBe(
        proxy.requests[0]!.headers['idempotency-key'],
      );
      expect(await prisma.payment.count({ where: { userId: user } })).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it.each([
    ['trpc-payments', () => paymentsUrl, /created \{[\s\S]*amount: 12\.5/],
    ['yoga-orders', () => `${ordersUrl}/graphql`, /createOrder: \{[\s\S]*total: '8\.40'/],
  ])(
    '%s/client.ts runs on its own, as the README says, against the server',
    async (example, url, printed) => {
      // A process of its own: nothing the server's modules register is there to help.
      const { stdout } = await run(
        process.execPath,
        ['--import', 'tsx', '--conditions=source', `examples/${example}/client.ts`],
        {
          env: { ...process.env, URL: url() },
          timeout: 30_000,
        },
      );
      expect(stdout).toMatch(printed);
    },
  );

  it('yoga-orders: a response lost on the way back is retried with its key and orders once', async () => {
    const proxy = await startFaultProxy(ordersUrl);
    try {
      const user = uniqueScope();
      proxy.plan('lose-response');
      const result = await createOrder(`${proxy.url}/graphql`, user, 'TEA-01', 2);
      expect(result.data?.createOrder.total).toBe('8.40');
      expect(proxy.requests).toHaveLength(2);
      expect(await prisma.order.count({ where: { userId: user } })).toBe(1);
    } finally {
      await proxy.close();
    }
  });
});
