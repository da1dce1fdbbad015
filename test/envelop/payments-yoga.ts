import type { Plugin } from '@envelop/core';
import type { GraphQLSchema } from 'graphql';
import type { Plugin as YogaPlugin } from 'graphql-yoga';
import { createSchema, createYoga } from 'graphql-yoga';
import {
  idempotentDirectiveTypeDefs,
  type UseIdempotencyOptions,
  useIdempotency,
} from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';
import { postGraphQL } from './graphql-client.js';

export type Context = { userId: string; tx?: unknown; db?: unknown };

type Resolvers = Record<string, Record<string, unknown>>;

/**
 * A schema whose `pay` mutation counts its calls and can be held open; `resolvers` adds to (or
 * replaces) its resolvers, per type.
 */
export function paymentsSchema(
  typeDefs = 'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! }',
  resolvers: Resolvers = {},
) {
  const calls = { pay: 0 };
  let gate: Promise<void> = Promise.resolve();
  const { Mutation, ...others } = resolvers;
  const schema = createSchema<Context>({
    typeDefs: [idempotentDirectiveTypeDefs, 'type Query { ping: Boolean }', typeDefs],
    resolvers: {
      ...others,
      Mutation: {
        pay: async (_: unknown, { amount }: { amount: number }) => {
          calls.pay++;
          await gate;
          return amount;
        },
        ...Mutation,
      },
    },
  });
  const hold = () => {
    let release!: () => void;
    gate = new Promise((resolve) => (release = resolve));
    return () => release();
  };
  return { schema, calls, hold };
}

/** A Yoga server of `schema` with the plugin between the `before` and `after` plugins. */
export function yogaFor(
  schema: GraphQLSchema,
  options: Partial<UseIdempotencyOptions<Context>> = {},
  { before = [], after = [] }: { before?: (Plugin | YogaPlugin)[]; after?: Plugin[] } = {},
) {
  const yoga = createYoga({
    schema,
    logging: false,
    context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
    plugins: [
      ...before,
      useIdempotency<Context>({ store: memoryStore(), scope: (context) => context.userId, ...options }),
      ...after,
    ],
  });
  const send = (query: string, idempotencyKey?: string) =>
    postGraphQL((url, init) => Promise.resolve(yoga.fetch(url, init)), 'http://yoga/graphql', {
      query,
      userId: 'user-1',
      idempotencyKey,
    });
  return { yoga, send };
}
