import { createSchema, createYoga, useExecutionCancellation } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { type IdempotencyResolverContext, useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';
import { gate } from '../helpers/gate.js';
import { postGraphQL } from './graphql-client.js';

// A whole operation under an `Idempotency-Key` header in lease mode: its effects are outside the
// database, so nothing the executor or the plugin does after the fields ran may free the key.

type Context = { userId: string; idempotency: IdempotencyResolverContext };

/** A Yoga whose one mutation runs `charge`, under the plugin in lease mode. */
function yogaWith(
  typeDefs: string,
  resolvers: Parameters<typeof createSchema<Context>>[0]['resolvers'],
  options: { now?: () => number; cancellation?: boolean; mode?: 'lease' | 'transactional' } = {},
) {
  const store = memoryStore(options.now ? { clock: options.now } : {});
  const yoga = createYoga({
    schema: createSchema<Context>({ typeDefs: `type Query { ping: Boolean } ${typeDefs}`, resolvers }),
    logging: false,
    context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
    plugins: [
      ...(options.cancellation ? [useExecutionCancellation()] : []),
      useIdempotency({
        store,
        scope: (context: Context) => context.userId,
        mode: options.mode ?? 'lease',
        leaseMs: 1_000,
      }),
    ],
  });
  const post = (query: string, init: { signal?: AbortSignal } = {}) =>
    postGraphQL(
      ((url: string, request: RequestInit) => yoga.fetch(url, { ...request, ...init })) as never,
      'http://yoga/graphql',
      { query, userId: 'alice', idempotencyKey: 'order-1' },
    );
  return Object.assign(post, { store });
}

describe('an operation under an Idempotency-Key header, in lease mode', () => {
  it('keeps its key when the client went away after the fields ran: the retry replays', async () => {
    const charges: number[] = [];
    const gateway = gate();
    const started = gate();
    const post = yogaWith(
      'type Payment { id: Int! amount: Int! } type Mutation { charge(amount: Int!): Payment! }',
      {
        Mutation: {
          charge: async (_: unknown, { amount }: { amount: number }) => {
            started.open();
            await gateway.opened;
            charges.push(amount);
            return { id: charges.length, amount };
          },
        },
      },
      { cancellation: true },
    );
    const connection = new AbortController();
    const first = post('mutation { charge(amount: 5) { id amount } }', { signal: connection.signal }).catch(
      () => undefined,
    );
    await started.opened;
    connection.abort(); // the client is gone while the gateway call runs
    gateway.open(); // which charges
    await first;
    const retry = await post('mutation { charge(amount: 5) { id amount } }');
    expect(retry.body.data).toEqual({ charge: { id: 1, amount: 5 } });
    expect(charges).toEqual([5]);
  });

  it('keeps its key when JSON cannot write the result: the retry answers as the first did, without running', async () => {
    const charges: number[] = [];
    const post = yogaWith('scalar Big type Mutation { charge(amount: Int!): Big! }', {
      // A scalar that serializes to a BigInt (graphql-scalars' BigInt, without a toJSON patch).
      Big: { serialize: (value: unknown) => BigInt(value as number) },
      Mutation: {
        charge: (_: unknown, { amount }: { amount: number }) => {
          charges.push(amount);
          return amount;
        },
      },
    });
    const first = await post('mutation { charge(amount: 5) }');
    const retry = await post('mutation { charge(amount: 5) }');
    expect(retry.status).toBe(first.status);
    expect(retry.body.errors?.map((error) => error.message)).toEqual(
      first.body.errors?.map((error) => error.message),
    );
    expect(charges).toEqual([5]);
  });

  it('in transactional mode, rolls back a result JSON cannot write, and keeps nothing', async () => {
    const charges: number[] = [];
    const post = yogaWith(
      'scalar Big type Mutation { charge(amount: Int!): Big! }',
      {
        Big: { serialize: (value: unknown) => BigInt(value as number) },
        Mutation: {
          charge: (_: unknown, { amount }: { amount: number }) => {
            charges.push(amount);
            return amount;
          },
        },
      },
      { mode: 'transactional' },
    );
    const first = await post('mutation { charge(amount: 5) }');
    expect(first.status).toBe(500);
    expect(await post.store.find('alice', 'order-1')).toBeNull();
  });

  it('answers a step that diverged with its own code, as under a field key', async () => {
    let names = ['reserve', 'charge'];
    let crash = true;
    const post = yogaWith('type Mutation { checkout(sku: String!): [String!]! }', {
      Mutation: {
        checkout: async (_: unknown, { sku }: { sku: string }, context: Context) => {
          const done: string[] = [];
          for (const name of names) {
            done.push(await context.idempotency.step(name, () => `${name} ${sku}`));
            if (crash) throw new Error('crashed');
          }
          return done;
        },
      },
    });
    await post('mutation { checkout(sku: "book") }');
    names = ['charge', 'reserve'];
    crash = false;
    const retry = await post('mutation { checkout(sku: "book") }');
    expect(retry.status).toBe(500);
    expect(retry.body.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_STEP_DIVERGED');
  });

  it('answers 409 for a step whose lease another request took over, and the retry replays its record', async () => {
    let now = Date.now();
    const charged: string[] = [];
    const slow = gate();
    const inStep = gate();
    let calls = 0;
    const post = yogaWith(
      'type Mutation { checkout(sku: String!): String! }',
      {
        Mutation: {
          checkout: (_: unknown, { sku }: { sku: string }, context: Context) => {
            const first = calls++ === 0;
            return context.idempotency.step('charge', async () => {
              if (first) {
                inStep.open();
                await slow.opened;
              }
              charged.push(sku);
              return `charged ${sku}`;
            });
          },
        },
      },
      { now: () => now },
    );
    const first = post('mutation { checkout(sku: "book") }');
    await inStep.opened;
    now += 10_000; // its lease ran out
    const takeover = await post('mutation { checkout(sku: "book") }');
    expect(takeover.body.data).toEqual({ checkout: 'charged book' });
    slow.open();
    const answer = await first;
    expect(answer.status).toBe(409);
    expect(answer.body.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_KEY_IN_PROGRESS');
    const retry = await post('mutation { checkout(sku: "book") }');
    expect(retry.body.data).toEqual({ checkout: 'charged book' });
  });
});
