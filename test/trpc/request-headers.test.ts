import { createTRPCClient, httpLink, TRPCClientError } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { type CreateHTTPContextOptions, createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { memoryStore } from '../../src/index.js';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { listen } from '../helpers/listen.js';

const t = initTRPC.context<{ user: string }>().create({ errorFormatter: idempotencyErrorFormatter });

/** A standalone server whose context is what `createContext` makes of the request. */
async function serve(
  createContext: (opts: CreateHTTPContextOptions) => { user: string },
  headers: Record<string, string> = { 'Idempotency-Key': 'k-1' },
) {
  let runs = 0;
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number() }))
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user }))
      .mutation(() => ++runs),
  });
  const server = createHTTPServer({ router, createContext });
  const { url, close } = await listen(server);
  const client = createTRPCClient<typeof router>({
    links: [httpLink({ url, headers })],
  });
  closers.push(close);
  return { client, runs: () => runs };
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

describe('idempotency() and the request headers createContext passes on', () => {
  it('says it cannot see the request headers when createContext does not pass req on', async () => {
    const { client, runs } = await serve(() => ({ user: 'alice' }));
    const error = await client.pay.mutate({ amount: 1 }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    const { message, data } = error as {
      message: string;
      data: { httpStatus: number; idempotencyCode: string };
    };
    expect([data.httpStatus, data.idempotencyCode]).toEqual([400, 'IDEMPOTENCY_KEY_MISSING']);
    expect(message).toMatch(/cannot see the request headers/);
    expect(message).toContain('createContext: ({ req, res, info }) => ({ req, res, info, … })');
    expect(runs()).toBe(0);
  });

  it('reads the header once createContext passes req on', async () => {
    const { client, runs } = await serve(({ req, res, info }) => ({ req, res, info, user: 'alice' }));
    expect(await client.pay.mutate({ amount: 1 })).toBe(1);
    expect(await client.pay.mutate({ amount: 1 })).toBe(1);
    expect(runs()).toBe(1);
  });

  it('asks for the header when it sees the request headers and no key among them', async () => {
    const { client } = await serve(({ req, res, info }) => ({ req, res, info, user: 'alice' }), {});
    const error = await client.pay.mutate({ amount: 1 }).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(
      /requires an idempotency key: send the Idempotency-Key header or the "idempotencyKey" input field$/,
    );
  });
});
