import type { AddressInfo } from 'node:net';
import type { ExecutionArgs } from 'graphql';
import { createClient, type FormattedExecutionResult } from 'graphql-ws';
import { useServer } from 'graphql-ws/use/ws';
import { createSchema, createYoga } from 'graphql-yoga';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { idempotentDirectiveTypeDefs, useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

type Rooted = ExecutionArgs & { rootValue: { execute(args: ExecutionArgs): unknown } };

/**
 * A Yoga server over graphql-ws, set up as Yoga's docs show (the upgrade request as `req` in the
 * context), and a client whose upgrade request carries an `Idempotency-Key` header.
 */
async function serveOverSocket() {
  const runs: number[] = [];
  const yoga = createYoga({
    schema: createSchema({
      typeDefs: [
        idempotentDirectiveTypeDefs,
        'type Query { ping: Boolean }',
        'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! }',
      ],
      resolvers: {
        Mutation: {
          pay: (_: unknown, { amount }: { amount: number }) => {
            runs.push(amount);
            return runs.length;
          },
        },
      },
    }),
    logging: false,
    context: () => ({ userId: 'alice' }),
    plugins: [
      useIdempotency<{ userId: string }>({ store: memoryStore(), scope: (context) => context.userId }),
    ],
  });
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => wss.once('listening', resolve));
  const server = useServer(
    {
      execute: (args) => (args as Rooted).rootValue.execute(args as Rooted) as never,
      onSubscribe: async (ctx, _id, params) => {
        const { schema, execute, contextFactory, parse, validate } = yoga.getEnveloped({
          ...ctx,
          req: ctx.extra.request,
          socket: ctx.extra.socket,
          params,
        });
        const args = {
          schema,
          operationName: params.operationName,
          document: parse(params.query),
          variableValues: params.variables,
          contextValue: await contextFactory(),
          rootValue: { execute },
        };
        const errors = validate(args.schema, args.document);
        return errors.length ? errors : args;
      },
    },
    wss,
  );
  closers.push(() => new Promise<void>((resolve) => wss.close(() => resolve())));
  closers.push(() => server.dispose());
  const { port } = wss.address() as AddressInfo;
  class KeyedSocket extends WebSocket {
    constructor(url: string | URL, protocols?: string | string[]) {
      super(url, protocols, { headers: { 'Idempotency-Key': 'upgrade-key' } });
    }
  }
  const client = createClient({ url: `ws://127.0.0.1:${port}`, webSocketImpl: KeyedSocket, lazy: true });
  closers.push(() => client.dispose());
  const pay = (amount: number, idempotencyKey?: string) =>
    new Promise<FormattedExecutionResult<Record<string, unknown>, unknown>>((resolve, reject) => {
      let result: FormattedExecutionResult<Record<string, unknown>, unknown> | undefined;
      client.subscribe(
        {
          query: 'mutation ($amount: Int!, $key: String) { pay(amount: $amount, idempotencyKey: $key) }',
          variables: { amount, key: idempotencyKey },
        },
        { next: (value) => (result = value), error: reject, complete: () => resolve(result!) },
      );
    });
  return { pay, runs };
}

describe('useIdempotency over a WebSocket (graphql-ws)', () => {
  it('reads no key from the upgrade request: it would key every mutation on the socket', async () => {
    const { pay, runs } = await serveOverSocket();
    const results = [await pay(1), await pay(2)];
    for (const { errors } of results) {
      expect(errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_MISSING' } }]);
      expect(errors?.[0]?.message).toBe(
        'Mutation.pay requires an idempotency key: send the "idempotencyKey" argument (over a WebSocket an operation has no headers of its own)',
      );
    }
    expect(runs).toEqual([]);
  });

  it('keys each mutation by its idempotencyKey argument', async () => {
    const { pay, runs } = await serveOverSocket();
    expect((await pay(1, 'k-1')).data).toEqual({ pay: 1 });
    expect((await pay(2, 'k-2')).data).toEqual({ pay: 2 });
    expect((await pay(1, 'k-1')).data).toEqual({ pay: 1 });
    expect(runs).toEqual([1, 2]);
  });
});
