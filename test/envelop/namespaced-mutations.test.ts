import { createSchema, createYoga } from 'graphql-yoga';
import { expect, it } from 'vitest';
import { useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';

/** A Yoga server of a namespaced mutation (`mutation { orders { create } }`), and its runs. */
function namespacedServer() {
  const runs = { create: 0 };
  const yoga = createYoga<{ userId: string }>({
    schema: createSchema({
      typeDefs: /* GraphQL */ `
        type Query { ok: Boolean }
        type OrderMutations { create(sku: String!, idempotencyKey: String): Int }
        type Mutation { orders: OrderMutations! }
      `,
      resolvers: { Mutation: { orders: () => ({}) }, OrderMutations: { create: () => ++runs.create } },
    }),
    logging: false,
    context: () => ({ userId: 'u' }),
    plugins: [
      useIdempotency<{ userId: string }>({ store: memoryStore(), scope: (context) => context.userId }),
    ],
  });
  const send = async (query: string, headers: Record<string, string> = {}) => {
    const response = await yoga.fetch('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ query }),
    });
    return {
      status: response.status,
      body: (await response.json()) as {
        data?: unknown;
        errors?: { message: string; extensions?: { code?: string } }[];
      },
    };
  };
  return { send, runs };
}

it('refuses a key given below the root of a mutation, where none is read, before anything runs', async () => {
  const { send, runs } = namespacedServer();
  for (const query of [
    'mutation { orders { create(sku: "A", idempotencyKey: "ns-1") } }',
    'mutation { ...Orders } fragment Orders on Mutation { orders { ... on OrderMutations { create(sku: "A", idempotencyKey: "ns-1") } } }',
  ]) {
    const { status, body } = await send(query);
    expect(status).toBe(400);
    expect(body.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_KEY_INVALID');
    expect(body.errors?.[0]?.message).toMatch(
      /^"orders\.create" is given an "idempotencyKey" argument below the root/,
    );
  }
  expect(runs.create).toBe(0);
});

it('runs a namespaced mutation once under an Idempotency-Key header, which keys the whole operation', async () => {
  const { send, runs } = namespacedServer();
  const query = 'mutation { orders { create(sku: "A", idempotencyKey: "ns-1") } }';
  const first = await send(query, { 'idempotency-key': 'op-1' });
  const retry = await send(query, { 'idempotency-key': 'op-1' });
  expect(first.body.data).toEqual({ orders: { create: 1 } });
  expect(retry.body.data).toEqual(first.body.data);
  expect(runs.create).toBe(1);
});
