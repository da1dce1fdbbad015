import { GraphQLError } from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import {
  type IdempotencyResolverContext,
  idempotentDirectiveTypeDefs,
  useIdempotency,
} from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';
import { postGraphQL } from './graphql-client.js';

const typeDefs = /* GraphQL */ `
  type Query {
    ping: Boolean
  }
  type Mutation {
    checkout(sku: String!, idempotencyKey: String): [String!]! @idempotent(mode: LEASE)
  }
`;

function createServer() {
  const runs: Record<string, number> = {};
  const state = { crashAfter: undefined as string | undefined };
  type Context = { userId: string; idempotency: IdempotencyResolverContext };
  const schema = createSchema<Context>({
    typeDefs: [idempotentDirectiveTypeDefs, typeDefs],
    resolvers: {
      Mutation: {
        checkout: async (_: unknown, { sku }: { sku: string }, context: Context) => {
          const done: string[] = [];
          for (const name of ['reserve', 'charge', 'ship']) {
            done.push(
              await context.idempotency.step(name, () => {
                runs[name] = (runs[name] ?? 0) + 1;
                return `${name} ${sku}`;
              }),
            );
            if (name === state.crashAfter) throw new Error('crashed');
          }
          return done;
        },
      },
    },
  });
  const userContexts: object[] = [];
  const yoga = createYoga({
    schema,
    logging: false,
    context: ({ request }) => {
      const context = { userId: request.headers.get('x-user-id') ?? '' };
      userContexts.push(context);
      return context;
    },
    plugins: [useIdempotency({ store: memoryStore(), scope: (context: Context) => context.userId })],
  });
  return { yoga, runs, state, userContexts };
}

describe('context.idempotency.step in a GraphQL resolver', () => {
  it('resumes a retry after the steps that completed, without writing into the user’s context', async () => {
    const { yoga, runs, state, userContexts } = createServer();
    const request = {
      query: 'mutation { checkout(sku: "book", idempotencyKey: "order-1") }',
      userId: 'alice',
    };
    const post = () => postGraphQL(yoga.fetch as never, 'http://yoga/graphql', request);
    state.crashAfter = 'charge';
    expect((await post()).body.errors).toHaveLength(1);
    state.crashAfter = undefined;
    const resumed = await post();
    expect(resumed.body.data).toEqual({ checkout: ['reserve book', 'charge book', 'ship book'] });
    expect((await post()).body.data).toEqual(resumed.body.data);
    expect(runs).toEqual({ reserve: 1, charge: 1, ship: 1 });
    for (const context of userContexts) expect(Object.hasOwn(context, 'idempotency')).toBe(false);
  });
});

describe('context.idempotency.step called wrongly', () => {
  type Context = { idempotency: IdempotencyResolverContext };
  /** A Yoga server whose `pay` is `pay`, keeping every error `replayErrors` is asked about. */
  function payServer(pay: (context: Context) => Promise<number>) {
    const schema = createSchema<Context>({
      typeDefs:
        'type Query { ping: Boolean } type Mutation { pay(amount: Int!, idempotencyKey: String): Int! }',
      resolvers: { Mutation: { pay: (_: unknown, __: unknown, context: Context) => pay(context) } },
    });
    const store = memoryStore();
    const yoga = createYoga({
      schema,
      logging: false,
      maskedErrors: false,
      plugins: [useIdempotency({ store, scope: () => 'alice', replayErrors: () => true })],
    });
    const send = async (query: string, headers: Record<string, string> = {}) =>
      (await (
        await yoga.fetch('http://yoga/graphql', {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify({ query }),
        })
      ).json()) as { data?: unknown; errors?: { message: string }[] };
    return { store, send };
  }

  it('is never kept for an operation’s header key, whatever replayErrors says', async () => {
    let fixed = false;
    // The code's mistake, until fixed: a step in transactional mode.
    const { store, send } = payServer(async (context) =>
      fixed ? 1 : context.idempotency.step('charge', () => 1),
    );
    const pay = () => send('mutation { pay(amount: 1) }', { 'Idempotency-Key': 'k-1' });
    expect((await pay()).errors?.[0]?.message).toMatch(/needs lease mode/);
    expect(await store.find('alice', 'k-1')).toBeNull();
    fixed = true;
    expect((await pay()).data).toEqual({ pay: 1 });
  });

  it('is never kept for a field key when the resolver wraps it in a GraphQLError', async () => {
    const { store, send } = payServer(async (context) => {
      try {
        return await context.idempotency.step('charge', () => 1);
      } catch (originalError) {
        throw new GraphQLError('payment failed', { originalError: originalError as Error });
      }
    });
    const answer = await send('mutation { pay(amount: 1, idempotencyKey: "k-1") }');
    expect(answer.errors?.[0]?.message).toBe('payment failed');
    expect(await store.find('alice', 'k-1')).toBeNull();
  });
});
