import { createTRPCClient, httpBatchLink, httpLink } from '@trpc/client';
import { initTRPC, TRPCError } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { idempotencyLink } from '../../src/client/index.js';
import { IdempotencyKeyInProgressError } from '../../src/index.js';
import { idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { listen } from '../helpers/listen.js';

// An error shape without data.httpStatus (a formatter of one's own) is retried by its
// data.idempotencyCode: `pay` answers the layer's 409 to its first send, then succeeds. In a batch
// whose other call succeeded, the response's 207 says nothing of this call.
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

async function serve() {
  const t = initTRPC.create({
    errorFormatter: (opts) => {
      const shape = idempotencyErrorFormatter(opts);
      const { httpStatus: _status, ...data } = shape.data as typeof shape.data & { httpStatus?: number };
      return { ...shape, data };
    },
  });
  const sends: unknown[] = [];
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number(), idempotencyKey: z.string() }))
      .mutation(({ input }) => {
        sends.push(input.idempotencyKey);
        if (sends.length === 1) {
          throw new TRPCError({
            code: 'CONFLICT',
            message: 'in progress',
            cause: new IdempotencyKeyInProgressError(1),
          });
        }
        return input.amount;
      }),
    note: t.procedure.mutation(() => 'noted'),
  });
  const { url, close } = await listen(createHTTPServer({ router }));
  closers.push(close);
  return { url, sends };
}

const retry = { attempts: 3, baseDelayMs: 1, maxDelayMs: 5 };

describe("idempotencyLink and the layer's 409 in an error shape without httpStatus", () => {
  it('behind httpLink, is sent again with the same key', async () => {
    const { url, sends } = await serve();
    // biome-ignore lint/suspicious/noExplicitAny: untyped client
    const client = createTRPCClient<any>({ links: [idempotencyLink({ retry }), httpLink({ url })] }) as any;
    const first = await client.pay.mutate({ amount: 5 }).catch((error: { data?: unknown }) => error.data);
    expect(first).toBe(5);
    expect(sends).toHaveLength(2);
    expect(new Set(sends).size).toBe(1);
  });

  it('behind httpBatchLink, in a batch with a call that succeeded (207), is sent again too', async () => {
    const { url, sends } = await serve();
    const links = [idempotencyLink({ retry }), httpBatchLink({ url })];
    // biome-ignore lint/suspicious/noExplicitAny: untyped client
    const client = createTRPCClient<any>({ links }) as any;
    const [paid, noted] = await Promise.all([
      client.pay.mutate({ amount: 5 }).catch((error: { data?: unknown; meta?: { response?: Response } }) => {
        expect(error.meta?.response?.status).toBe(207);
        return error.data;
      }),
      client.note.mutate(),
    ]);
    expect(noted).toBe('noted');
    expect(sends).toHaveLength(2); // the layer's 409 (IDEMPOTENCY_KEY_IN_PROGRESS) is retried with the same key
    expect(paid).toBe(5);
  });
});

describe('idempotencyLink and a 200 it cannot read', () => {
  it('sends the mutation once: the server answered, so it ran', async () => {
    let sends = 0;
    const fetch = async () => {
      sends++;
      // Not a tRPC response (a proxy's JSON, a transformer the client lacks).
      return new Response('{"ok":true}', { status: 200, headers: { 'content-type': 'application/json' } });
    };
    const links = [
      idempotencyLink({ retry }),
      httpLink({ url: 'http://server/trpc', fetch: fetch as never }),
    ];
    // biome-ignore lint/suspicious/noExplicitAny: untyped client
    const client = createTRPCClient<any>({ links }) as any;
    await expect(client.pay.mutate({ amount: 5 })).rejects.toBeInstanceOf(Error);
    expect(sends).toBe(1);
  });
});
