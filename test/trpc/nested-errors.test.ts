import { createTRPCClient, httpLink } from '@trpc/client';
import { initTRPC, TRPCError } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { idempotencyHeaders, idempotencyLink } from '../../src/client/index.js';
import { IdempotencyKeyInProgressError, IdempotencyKeyMismatchError, memoryStore } from '../../src/index.js';
import { type IdempotencyMeta, idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { gate } from '../helpers/gate.js';
import { listen } from '../helpers/listen.js';

// An error of ours that a resolver lets through is a nested call's answer about another key, after
// this resolver may have acted: never a retryable 409 for this call, never kept as its answer.
const t = initTRPC
  .context<{ user: string }>()
  .meta<IdempotencyMeta>()
  .create({ errorFormatter: idempotencyErrorFormatter });

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

async function serve<R extends Parameters<typeof createHTTPServer>[0]['router']>(router: R) {
  const { url, close } = await listen(
    createHTTPServer({ router, createContext: ({ req, res, info }) => ({ req, res, info, user: 'alice' }) }),
  );
  closers.push(close);
  const statuses: number[] = [];
  const fetchCounting: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    statuses.push(response.status);
    return response;
  };
  return { url, statuses, fetchCounting };
}

describe('idempotency(): a nested idempotent call’s error that the resolver lets through', () => {
  it('answers a server-side caller’s 409 after the resolver acted as INTERNAL_SERVER_ERROR, which idempotencyLink does not retry', async () => {
    const store = memoryStore();
    const mw = idempotency({
      store,
      scope: ({ ctx }: { ctx: { user: string } }) => ctx.user,
      mode: 'lease',
      waitTimeoutMs: 0,
    });
    const held = gate();
    let charges = 0;
    const router = t.router({
      reserve: t.procedure
        .input(z.object({ idempotencyKey: z.string() }))
        .use(mw)
        .mutation(async () => {
          await held.opened;
          return 'reserved';
        }),
      checkout: t.procedure
        .input(z.object({ sku: z.string() }))
        .use(mw)
        .mutation(async ({ ctx }) => {
          charges++; // the gateway's charge, outside the database
          await caller({ user: ctx.user }).reserve({ idempotencyKey: 'reserve-1' }); // held: CONFLICT
          return 'paid';
        }),
    });
    const caller = t.createCallerFactory(router);
    const { url, statuses, fetchCounting } = await serve(router);
    const reserving = caller({ user: 'alice' }).reserve({ idempotencyKey: 'reserve-1' });
    const client = createTRPCClient<typeof router>({
      links: [
        idempotencyLink({ retry: { attempts: 3, baseDelayMs: 1, maxDelayMs: 2 } }),
        httpLink({ url, headers: ({ op }) => idempotencyHeaders({ op }), fetch: fetchCounting }),
      ],
    });
    const error = await client.checkout.mutate({ sku: 'book' }).catch((e: unknown) => e);
    held.open();
    await reserving;
    expect(statuses).toEqual([500]);
    expect(error).toMatchObject({ data: { code: 'INTERNAL_SERVER_ERROR', idempotencyCode: null } });
    expect(charges).toBe(1);
  });

  it('keeps a code the resolver chose itself that asks for no retry, with ours as its cause', async () => {
    const router = t.router({
      reserve: t.procedure
        .input(z.object({ items: z.array(z.string()) }))
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user }))
        .mutation(() => {
          throw new TRPCError({
            code: 'BAD_REQUEST',
            message: 'This cart was already reserved with other items',
            cause: new IdempotencyKeyMismatchError(new Date()), // a nested call's
          });
        }),
    });
    const { url, statuses, fetchCounting } = await serve(router);
    const client = createTRPCClient<typeof router>({
      links: [httpLink({ url, headers: { 'Idempotency-Key': 'k-1' }, fetch: fetchCounting })],
    });
    const error = await client.reserve.mutate({ items: ['book'] }).catch((e: unknown) => e);
    expect(statuses).toEqual([400]);
    expect(error).toMatchObject({
      message: 'This cart was already reserved with other items',
      data: { code: 'BAD_REQUEST' },
    });
  });

  it('never keeps an error of ours the resolver threw, whatever replayErrors says: each answer is the same 500', async () => {
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .input(z.object({ amount: z.number() }))
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user, replayErrors: () => true }))
        .mutation(() => {
          runs++;
          throw new IdempotencyKeyInProgressError(1_000); // a nested runIdempotent's
        }),
    });
    const { url, statuses, fetchCounting } = await serve(router);
    const client = createTRPCClient<typeof router>({
      links: [httpLink({ url, headers: { 'Idempotency-Key': 'k-1' }, fetch: fetchCounting })],
    });
    const answers = [];
    for (let i = 0; i < 2; i++) {
      const error = (await client.pay.mutate({ amount: 1 }).catch((e: unknown) => e)) as {
        data: { code: string; idempotencyCode: unknown };
      };
      answers.push({ code: error.data.code, idempotencyCode: error.data.idempotencyCode });
    }
    expect(statuses).toEqual([500, 500]);
    expect(answers).toEqual([
      { code: 'INTERNAL_SERVER_ERROR', idempotencyCode: null },
      { code: 'INTERNAL_SERVER_ERROR', idempotencyCode: null },
    ]);
    // Not kept: a "still running" about another key would have been this key's answer for a day.
    expect(runs).toBe(2);
  });
});
