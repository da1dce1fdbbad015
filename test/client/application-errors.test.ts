import type { AddressInfo } from 'node:net';
import { createTRPCClient, httpLink, TRPCClientError } from '@trpc/client';
import { initTRPC, TRPCError } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { GraphQLError } from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { idempotencyHeaders, idempotencyLink, idempotentFetch } from '../../src/client/index.js';
import { useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';

// A resolver may answer 409 or 503 itself ("order already shipped"), or 502 or 504 (the bank it
// called failed): unlike the idempotency layer's 409 and 503, or a proxy's 502 page, that answer comes
// after it ran, and in lease mode its outside effect is not undone. Where the response says so, the
// clients return it instead of running the resolver again.

describe('idempotencyLink and a resolver that answers 409, 502, 503 or 504 itself', () => {
  const t = initTRPC.context<{ req: unknown; res: unknown; info: unknown }>().create({
    errorFormatter: idempotencyErrorFormatter,
  });
  const charges = { count: 0 };
  const router = t.router({
    charge: t.procedure
      .input(
        z.object({ code: z.enum(['CONFLICT', 'SERVICE_UNAVAILABLE', 'BAD_GATEWAY', 'GATEWAY_TIMEOUT']) }),
      )
      .use(idempotency({ store: memoryStore(), scope: () => 'u', mode: 'lease' }))
      .mutation(({ input }) => {
        charges.count++; // an effect outside the database
        throw new TRPCError({ code: input.code, message: 'the gateway said no' });
      }),
  });
  const server = createHTTPServer({ router, createContext: ({ req, res, info }) => ({ req, res, info }) });
  let url: string;
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((resolve) => server.close(resolve)));

  it.each(['CONFLICT', 'SERVICE_UNAVAILABLE', 'BAD_GATEWAY', 'GATEWAY_TIMEOUT'] as const)(
    'returns its %s at once, run once',
    async (code) => {
      charges.count = 0;
      const client = createTRPCClient<typeof router>({
        links: [
          idempotencyLink({ retry: { baseDelayMs: 1 } }),
          httpLink({ url, headers: idempotencyHeaders }),
        ],
      });
      const error = await client.charge.mutate({ code }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TRPCClientError);
      expect((error as TRPCClientError<typeof router>).data).toMatchObject({ code, idempotencyCode: null });
      expect(charges.count).toBe(1);
    },
  );
});

describe('idempotentFetch and a resolver that answers 409, 502 or 504 itself', () => {
  let charges = 0;
  const yoga = createYoga({
    logging: false,
    schema: createSchema({
      typeDefs:
        'type Query { ping: Boolean } type Mutation { charge(status: Int!, idempotencyKey: String): Int! }',
      resolvers: {
        Mutation: {
          charge: (_, { status }: { status: number }) => {
            charges++;
            throw new GraphQLError('order already shipped', {
              extensions: { code: 'ORDER_SHIPPED', http: { status } },
            });
          },
        },
      },
    }),
    context: () => ({ userId: 'u' }),
    plugins: [useIdempotency({ store: memoryStore(), scope: () => 'u', mode: 'lease' })],
  });
  const send = idempotentFetch((input, init) => Promise.resolve(yoga.fetch(new Request(input, init))), {
    retry: { baseDelayMs: 1 },
  });

  it.each([409, 502, 504])('returns its %i at once, run once', async (status) => {
    charges = 0;
    const response = await send('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        query: `mutation { charge(status: ${status}, idempotencyKey: "k-${status}") }`,
      }),
    });
    expect(response.status).toBe(status);
    expect(await response.json()).toMatchObject({ errors: [{ extensions: { code: 'ORDER_SHIPPED' } }] });
    expect(charges).toBe(1);
  });
});
