import { envelop, useEngine, useSchema } from '@envelop/core';
import * as graphql from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';
import { postGraphQL } from './graphql-client.js';

// A resolver that hands its context on as a copy (`{ ...context }`, to a service) finds the shared
// context's members in it, with the plugin as without.
function server(withPlugin: boolean) {
  const seen: unknown[] = [];
  type Context = { userId: string };
  const schema = createSchema<Context>({
    typeDefs:
      'type Query { ping: Boolean } type Mutation { pay(amount: Int!, idempotencyKey: String): Int! }',
    resolvers: {
      Mutation: {
        pay: (_: unknown, { amount }: { amount: number }, context: Context) => {
          const forService = { ...context };
          seen.push(forService.userId);
          return amount;
        },
      },
    },
  });
  const yoga = createYoga({
    schema,
    logging: false,
    context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
    plugins: withPlugin
      ? [
          useIdempotency({
            store: memoryStore(),
            scope: (context: Context) => context.userId,
            required: false,
          }),
        ]
      : [],
  });
  const post = (query: string, idempotencyKey?: string) =>
    postGraphQL(yoga.fetch as never, 'http://yoga/graphql', { query, userId: 'alice', idempotencyKey });
  return { post, seen };
}

describe("a copy of the resolver's context", () => {
  it('holds the shared members without the plugin', async () => {
    const { post, seen } = server(false);
    await post('mutation { pay(amount: 5, idempotencyKey: "k1") }');
    expect(seen).toEqual(['alice']);
  });

  it('holds the shared members under a field key, a header key and a keyless optional call', async () => {
    const { post, seen } = server(true);
    await post('mutation { pay(amount: 5, idempotencyKey: "k1") }');
    await post('mutation { pay(amount: 5) }', 'k2');
    await post('mutation { pay(amount: 5) }');
    expect(seen).toEqual(['alice', 'alice', 'alice']);
  });
});

describe("the resolver's context", () => {
  it('reads what the shared context holds when it reads it, and keeps its own writes', async () => {
    const seen: unknown[] = [];
    type Shared = { user: string | null; signIn(name: string): void; note?: string };
    const schema = createSchema<Shared>({
      typeDefs:
        'type Query { ping: Boolean } type Mutation { pay(amount: Int!, idempotencyKey: String): Int! }',
      resolvers: {
        Mutation: {
          pay: (_: unknown, { amount }: { amount: number }, context: Shared) => {
            context.signIn('bob'); // writes the shared context
            context.note = 'mine';
            seen.push(context.user, { ...context }.user, context.note);
            return amount;
          },
        },
      },
    });
    const yoga = createYoga({
      schema: schema as never,
      logging: false,
      context: (initial) => {
        const shared = initial as unknown as Record<string, unknown>;
        return Object.assign(shared, {
          user: null,
          signIn(name: string) {
            shared.user = name;
          },
        }) as never;
      },
      plugins: [useIdempotency({ store: memoryStore(), scope: () => 'alice' })],
    });
    await postGraphQL(yoga.fetch as never, 'http://yoga/graphql', {
      query: 'mutation { pay(amount: 5, idempotencyKey: "k1") }',
      userId: 'alice',
    });
    expect(seen).toEqual(['bob', 'bob', 'mine']);
  });
});

describe('useIdempotency and a context that is an instance of a class (Envelop without Yoga)', () => {
  /** A request scope of the application's own, whose getter picks the resolver's transaction. */
  class RequestContext {
    declare readonly idempotency?: { key: string };
    constructor(
      readonly userId: string,
      readonly req: { headers: Record<string, string> },
    ) {}
    /** What a `get db() { return this.tx ?? prisma }` reads: this call's own members. */
    get claimedKey() {
      return this.idempotency?.key ?? 'none';
    }
    describe() {
      return `${this.userId} under ${this.claimedKey}`;
    }
  }
  const schema = graphql.buildSchema(
    'type Query { me: String } type Mutation { pay(amount: Int!, idempotencyKey: String): String! note: String! }',
  );
  const rootValue = {
    pay: (_: unknown, context: RequestContext) => `paid by ${context.describe()}`,
    note: (_: unknown, context: RequestContext) => `noted by ${context.describe()}`,
  };
  const getEnveloped = envelop({
    plugins: [
      useEngine(graphql),
      useSchema(schema),
      useIdempotency({ store: memoryStore(), scope: (context: RequestContext) => context.userId }),
    ],
  });
  async function run(query: string, headers: Record<string, string> = {}) {
    const { execute, schema: enveloped, parse } = getEnveloped();
    return (await execute({
      schema: enveloped,
      document: parse(query),
      rootValue,
      contextValue: new RequestContext('alice', { headers }),
    })) as graphql.ExecutionResult;
  }

  it('runs its methods and getters on the resolver’s own context, which holds the call’s claim', async () => {
    expect(await run('mutation { pay(amount: 1, idempotencyKey: "k-1") }')).toEqual({
      data: { pay: 'paid by alice under k-1' },
      extensions: expect.anything(),
    });
    expect(await run('mutation { note }', { 'idempotency-key': 'k-2' })).toEqual({
      data: { note: 'noted by alice under k-2' },
      extensions: expect.anything(),
    });
  });
});
