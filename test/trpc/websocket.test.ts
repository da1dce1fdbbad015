import type { AddressInfo } from 'node:net';
import { createTRPCClient, createWSClient, TRPCClientError, wsLink } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { applyWSSHandler, type CreateWSSContextFnOptions } from '@trpc/server/adapters/ws';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { z } from 'zod';
import { memoryStore } from '../../src/index.js';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';

const createContext = ({ req, res, info }: CreateWSSContextFnOptions) => ({ req, res, info, user: 'alice' });
const t = initTRPC.context<typeof createContext>().create({ errorFormatter: idempotencyErrorFormatter });

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/**
 * tRPC over a WebSocket (tRPC's ws adapter): `ctx.req` is the socket's upgrade request, here sent
 * with an `Idempotency-Key` header, as a Node client can.
 */
async function serveOverSocket() {
  const runs: number[] = [];
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number() }))
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user }))
      .mutation(({ input }) => {
        runs.push(input.amount);
        return runs.length;
      }),
  });
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => wss.once('listening', resolve));
  const handler = applyWSSHandler({ wss, router, createContext });
  closers.push(() => new Promise<void>((resolve) => wss.close(() => resolve())));
  closers.push(() => handler.broadcastReconnectNotification());
  const { port } = wss.address() as AddressInfo;
  class KeyedSocket extends WebSocket {
    constructor(url: string | URL) {
      super(url, { headers: { 'Idempotency-Key': 'upgrade-key' } });
    }
  }
  const wsClient = createWSClient({ url: `ws://127.0.0.1:${port}`, WebSocket: KeyedSocket as never });
  closers.push(() => wsClient.close());
  const client = createTRPCClient<typeof router>({ links: [wsLink({ client: wsClient })] });
  return { client, runs };
}

describe('idempotency() over a WebSocket', () => {
  it('reads no key from the upgrade request: it would key every mutation on the socket', async () => {
    const { client, runs } = await serveOverSocket();
    const errors = await Promise.all([
      client.pay.mutate({ amount: 1 }).catch((e: unknown) => e),
      client.pay.mutate({ amount: 2 }).catch((e: unknown) => e),
    ]);
    for (const error of errors) {
      expect(error).toBeInstanceOf(TRPCClientError);
      const { message, data } = error as { message: string; data: { idempotencyCode: string } };
      expect(data.idempotencyCode).toBe('IDEMPOTENCY_KEY_MISSING');
      expect(message).toContain('over a WebSocket');
      expect(message).toContain('"idempotencyKey" input field');
    }
    expect(runs).toEqual([]);
  });

  it('keys each mutation by its idempotencyKey input field', async () => {
    const { client, runs } = await serveOverSocket();
    const pay = (amount: number, idempotencyKey: string) =>
      client.pay.mutate({ amount, idempotencyKey } as { amount: number });
    expect(await pay(1, 'k-1')).toBe(1);
    expect(await pay(2, 'k-2')).toBe(2);
    expect(await pay(1, 'k-1')).toBe(1);
    expect(runs).toEqual([1, 2]);
  });
});
