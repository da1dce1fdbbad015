import { GraphQLError } from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { idempotentFetch } from '../../src/client/index.js';
import { idempotentDirectiveTypeDefs, useIdempotency } from '../../src/envelop/index.js';
import { IdempotencyKeyInProgressError, memoryStore, runIdempotent } from '../../src/index.js';
import { gate } from '../helpers/gate.js';

const post = (
  yoga: { fetch(url: string, init: RequestInit): Response | Promise<Response> },
  query: string,
  headers: Record<string, string> = {},
) =>
  yoga.fetch('http://localhost/graphql', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json', ...headers },
    body: JSON.stringify({ query }),
  });

/** `idempotentFetch` over `yoga`, recording each attempt's status and `Retry-After`. */
function retryingFetch(yoga: { fetch(request: Request): Response | Promise<Response> }) {
  const statuses: (string | number | null)[][] = [];
  const send = idempotentFetch(
    async (input, init) => {
      const response = await yoga.fetch(new Request(input as string, init));
      statuses.push([response.status, response.headers.get('retry-after')]);
      return response;
    },
    { retry: { attempts: 3, baseDelayMs: 1, maxDelayMs: 2 } },
  );
  return { send, statuses };
}

describe('useIdempotency: an error of ours that a resolver throws (a nested call’s)', () => {
  it('is the resolver’s own error after it acted: no 409 and no Retry-After, so idempotentFetch does not run it again', async () => {
    const store = memoryStore();
    const held = gate();
    const reserve = () =>
      runIdempotent(
        {
          store,
          scope: 'alice',
          key: 'reserve-1',
          operation: 'reserve',
          input: {},
          mode: 'lease',
          waitTimeoutMs: 0,
        },
        async () => {
          await held.opened;
          return 'reserved';
        },
      );
    let charges = 0;
    const schema = createSchema({
      typeDefs: [
        idempotentDirectiveTypeDefs,
        'type Query { ping: Boolean } type Mutation { checkout(idempotencyKey: String): String! @idempotent(mode: LEASE) }',
      ],
      resolvers: {
        Mutation: {
          checkout: async () => {
            charges++; // the gateway's charge
            await reserve(); // held by another request: IDEMPOTENCY_KEY_IN_PROGRESS
            return 'paid';
          },
        },
      },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      plugins: [useIdempotency({ store, scope: () => 'alice' })],
    });
    const reserving = reserve();
    const { send, statuses } = retryingFetch(yoga);
    await send('http://localhost/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json' },
      body: JSON.stringify({ query: 'mutation { checkout(idempotencyKey: "order-1") }' }),
    });
    held.open();
    await reserving;
    expect(statuses).toHaveLength(1);
    expect(statuses[0]![0]).not.toBe(409);
    expect(statuses[0]![1]).toBeNull();
    expect(charges).toBe(1);
  });

  it('is the resolver’s own too when it returns it, or when it rejects a promise in the returned value', async () => {
    const nested = () => Promise.reject(new IdempotencyKeyInProgressError(30_000)); // a nested call's
    let charges = 0;
    const schema = createSchema({
      typeDefs: [
        idempotentDirectiveTypeDefs,
        'type Query { ping: Boolean } type Order { id: Int, reservation: String }',
        'type Mutation { returned(idempotencyKey: String): Order @idempotent(mode: LEASE) member(idempotencyKey: String): Order @idempotent(mode: LEASE) }',
      ],
      resolvers: {
        Mutation: {
          returned: async () => {
            charges++;
            return await nested().catch((error: unknown) => error); // returned, as graphql-js allows
          },
          member: async () => {
            charges++;
            return { id: 1, reservation: nested() };
          },
        },
      },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      plugins: [useIdempotency({ store: memoryStore(), scope: () => 'alice' })],
    });
    for (const field of ['returned', 'member']) {
      const response = await post(yoga, `mutation { ${field}(idempotencyKey: "${field}-1") { id } }`);
      expect([response.status, response.headers.get('retry-after')]).not.toEqual([409, '30']);
      expect(response.status).not.toBe(409);
    }
    expect(charges).toBe(2);
  });

  it.each([
    ['an argument key, under a lease', 'mutation { checkout(idempotencyKey: "order-1") }', {}],
    ['an Idempotency-Key header, under a lease', 'mutation { checkout }', { 'Idempotency-Key': 'order-1' }],
  ])(
    'is the resolver’s own as a GraphQLError it forwards (a downstream answer), under %s: no 409 and no Retry-After',
    async (_, query, headers) => {
      let charges = 0;
      const schema = createSchema({
        typeDefs: [
          idempotentDirectiveTypeDefs,
          'type Query { ping: Boolean } type Mutation { checkout(idempotencyKey: String): String @idempotent(mode: LEASE) }',
        ],
        resolvers: {
          Mutation: {
            checkout: () => {
              charges++; // the gateway's charge
              // A downstream GraphQL service's answer, forwarded as it came (extensions and all).
              throw new GraphQLError('The idempotency key is in use by a request still running', {
                extensions: {
                  code: 'IDEMPOTENCY_KEY_IN_PROGRESS',
                  http: { status: 409, headers: { 'Retry-After': '2' } },
                },
              });
            },
          },
        },
      });
      const yoga = createYoga({
        schema,
        logging: false,
        plugins: [useIdempotency({ store: memoryStore(), scope: () => 'alice', mode: 'lease' })],
      });
      const { send, statuses } = retryingFetch(yoga);
      const response = await send('http://localhost/graphql', {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/graphql-response+json',
          ...headers,
        },
        body: JSON.stringify({ query }),
      });
      expect(statuses).toHaveLength(1);
      expect(statuses[0]![0]).not.toBe(409);
      expect(statuses[0]![1]).toBeNull();
      const body = (await response.json()) as { errors?: { message: string }[] };
      expect(body.errors?.[0]?.message).toBe('The idempotency key is in use by a request still running');
      expect(charges).toBe(1);
    },
  );

  /** A downstream GraphQL service's 409, forwarded as it came (extensions and all). */
  const forwarded = () =>
    new GraphQLError('The idempotency key is in use by a request still running', {
      extensions: {
        code: 'IDEMPOTENCY_KEY_IN_PROGRESS',
        http: { status: 409, headers: { 'Retry-After': '2' } },
      },
    });
  const byArgument = 'mutation { pay(amount: 1, idempotencyKey: "k-1") }';
  it.each([
    [
      'its own error of ours (a nested call’s), by an argument key',
      () => new IdempotencyKeyInProgressError(2_000),
      byArgument,
      {},
    ],
    ['a downstream answer it forwards, by an argument key', forwarded, byArgument, {}],
    [
      'a downstream answer it forwards, by an Idempotency-Key header',
      forwarded,
      'mutation { pay(amount: 1) }',
      { 'Idempotency-Key': 'k-1' },
    ],
  ])(
    'is never kept for the key as %s, whatever replayErrors says, and gets the same answer each time',
    async (_, thrown, query, headers) => {
      let runs = 0;
      const schema = createSchema({
        typeDefs:
          'type Query { ping: Boolean } type Mutation { pay(amount: Int!, idempotencyKey: String): Int! }',
        resolvers: {
          Mutation: {
            pay: () => {
              runs++;
              throw thrown();
            },
          },
        },
      });
      const yoga = createYoga({
        schema,
        logging: false,
        plugins: [useIdempotency({ store: memoryStore(), scope: () => 'alice', replayErrors: () => true })],
      });
      const answers = [];
      for (let i = 0; i < 2; i++) {
        const response = await post(yoga, query, headers);
        const body = (await response.json()) as { errors?: { extensions?: { code?: string } }[] };
        answers.push([
          response.status,
          response.headers.get('retry-after'),
          body.errors?.[0]?.extensions?.code,
        ]);
      }
      expect(answers[1]).toEqual(answers[0]);
      expect(answers[0]![0]).not.toBe(409);
      expect(answers[0]![1]).toBeNull();
      expect(runs).toBe(2);
    },
  );
});

describe('useIdempotency under an Idempotency-Key header: an operation one of whose fields threw an error of ours', () => {
  it('is not kept, even when replayErrors accepts every error: a retry runs it again', async () => {
    let runs = 0;
    const schema = createSchema({
      typeDefs: 'type Query { ping: Boolean } type Mutation { declined: Int, reserve: Int }',
      resolvers: {
        Mutation: {
          declined: () => {
            runs++;
            throw Object.assign(new Error('declined'), { code: 'CARD_DECLINED' });
          },
          reserve: () => {
            throw new IdempotencyKeyInProgressError(2_000); // a nested runIdempotent's
          },
        },
      },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      plugins: [useIdempotency({ store: memoryStore(), scope: () => 'alice', replayErrors: () => true })],
    });
    for (let i = 0; i < 2; i++) {
      const response = await post(yoga, 'mutation { declined reserve }', { 'Idempotency-Key': 'op-1' });
      expect(response.headers.get('retry-after')).toBeNull();
    }
    expect(runs).toBe(2);
  });
});

describe('useIdempotency on a schema whose query root is its mutation root', () => {
  it('refuses an idempotent field selected from a query, where it would run without a record', async () => {
    let runs = 0;
    const schema = createSchema({
      typeDefs: [
        idempotentDirectiveTypeDefs,
        'schema { query: Root mutation: Root } type Root { ping: Boolean pay(amount: Int!, idempotencyKey: String): Int! @idempotent }',
      ],
      resolvers: {
        Root: {
          pay: (_: unknown, { amount }: { amount: number }) => {
            runs++;
            return amount;
          },
        },
      },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      plugins: [useIdempotency({ store: memoryStore(), scope: () => 'alice' })],
    });
    const viaQuery = await post(yoga, 'query { pay(amount: 1, idempotencyKey: "k") }');
    expect(viaQuery.status).toBe(400);
    expect(await viaQuery.json()).toMatchObject({
      errors: [{ extensions: { code: 'IDEMPOTENCY_KEY_INVALID' } }],
    });
    // As a mutation it runs once, and its retry replays.
    for (let i = 0; i < 2; i++) {
      const response = await post(yoga, 'mutation { pay(amount: 1, idempotencyKey: "k") }');
      expect(await response.json()).toMatchObject({ data: { pay: 1 } });
    }
    expect(runs).toBe(1);
  });
});
