import { initTRPC } from '@trpc/server';
import { type CreateFastifyContextOptions, fastifyTRPCPlugin } from '@trpc/server/adapters/fastify';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { memoryStore } from '../../src/index.js';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { gate } from '../helpers/gate.js';

const createContext = ({ req, res, info }: CreateFastifyContextOptions) => ({
  req,
  res,
  info,
  user: 'alice',
});
const t = initTRPC.context<typeof createContext>().create({ errorFormatter: idempotencyErrorFormatter });

const servers: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

/** tRPC served by Fastify through tRPC's own plugin, as its docs set it up. */
async function serve(resolver: () => Promise<number>) {
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number() }))
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user, waitTimeoutMs: 50 }))
      .mutation(resolver),
  });
  const server = Fastify();
  await server.register(fastifyTRPCPlugin, { prefix: '/trpc', trpcOptions: { router, createContext } });
  const url = await server.listen({ host: '127.0.0.1', port: 0 });
  servers.push(server);
  return (key: string) =>
    fetch(`${url}/trpc/pay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ amount: 1 }),
    });
}

describe('idempotency() under Fastify (tRPC’s fastify adapter, ctx.res a FastifyReply)', () => {
  it('marks a replay with Idempotent-Replayed', async () => {
    let runs = 0;
    const pay = await serve(async () => ++runs);
    const first = await pay('k-1');
    const retry = await pay('k-1');
    expect([first.status, retry.status, runs]).toEqual([200, 200, 1]);
    expect(await retry.json()).toEqual(await first.json());
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
  });

  it('answers a duplicate of a running call 409 with Retry-After', async () => {
    const { opened, open } = gate();
    const pay = await serve(async () => {
      await opened;
      return 1;
    });
    const first = pay('k-2');
    const duplicate = await pay('k-2');
    open();
    expect((await first).status).toBe(200);
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers.get('retry-after')).toBe('1');
  });
});
