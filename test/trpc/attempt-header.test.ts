import { createTRPCClient, httpLink } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { memoryStore } from '../../src/index.js';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { countingReads } from '../helpers/counting-reads.js';
import { listen } from '../helpers/listen.js';

const t = initTRPC.context<{ user: string }>().create({ errorFormatter: idempotencyErrorFormatter });

describe('idempotency() and the Idempotency-Attempt header', () => {
  const { store, reads } = countingReads(memoryStore());
  let runs = 0;
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number() }))
      .use(idempotency({ store, scope: ({ ctx }) => ctx.user }))
      .mutation(({ input }) => ({ run: ++runs, amount: input.amount })),
  });
  const server = createHTTPServer({
    router,
    createContext: ({ req, res, info }) => ({ req, res, info, user: 'alice' }),
  });
  let url = '';
  let close: () => Promise<void> = async () => undefined;
  beforeAll(async () => {
    ({ url, close } = await listen(server));
  });
  afterAll(() => close());

  /** Sends `pay` with these headers; returns its result, how many reads it cost, and the replay header. */
  async function pay(headers: Record<string, string>, amount = 1) {
    let replayed: string | null = null;
    const client = createTRPCClient<typeof router>({
      links: [
        httpLink({
          url,
          headers,
          fetch: async (input, init) => {
            const response = await fetch(input, init);
            replayed = response.headers.get('idempotent-replayed');
            return response;
          },
        }),
      ],
    });
    const before = reads.count;
    const result = await client.pay.mutate({ amount });
    return { result, reads: reads.count - before, replayed };
  }

  it('runs a fresh key sent with Idempotency-Attempt: 1 without reading its record first', async () => {
    const before = runs;
    const sent = await pay({ 'Idempotency-Key': 'fresh-1', 'Idempotency-Attempt': '1' });
    expect(sent).toMatchObject({ result: { amount: 1 }, reads: 0, replayed: null });
    expect(runs - before).toBe(1);
  });

  it('still replays the first result to a key sent again with Idempotency-Attempt: 1 (a wrong hint)', async () => {
    const headers = { 'Idempotency-Key': 'lying-1', 'Idempotency-Attempt': '1' };
    const first = await pay(headers);
    const again = await pay(headers);
    expect(again).toEqual({ result: first.result, reads: 0, replayed: 'true' });
    const retried = await pay({ ...headers, 'Idempotency-Attempt': '2' });
    expect(retried).toEqual({ result: first.result, reads: 1, replayed: 'true' });
    await expect(pay(headers, 2)).rejects.toMatchObject({
      data: { idempotencyCode: 'IDEMPOTENCY_KEY_MISMATCH' },
    });
  });

  it.each(['2', '0', '01', 'one', '1, 1', '1.0', ''])(
    'reads the record first, as without the header, when Idempotency-Attempt is %j',
    async (value) => {
      const key = `other-${value.replace(/\W/g, '_')}`;
      const first = await pay({ 'Idempotency-Key': key, 'Idempotency-Attempt': value });
      expect(first).toMatchObject({ reads: 1, replayed: null });
      const again = await pay({ 'Idempotency-Key': key, 'Idempotency-Attempt': value });
      expect(again).toEqual({ result: first.result, reads: 1, replayed: 'true' });
    },
  );
});
