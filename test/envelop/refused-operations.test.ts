import { useDeferStream } from '@graphql-yoga/plugin-defer-stream';
import { describe, expect, it } from 'vitest';
import { postGraphQL } from './graphql-client.js';
import { paymentsSchema, yogaFor } from './payments-yoga.js';

/** `Mutation.pay` is idempotent; `v1` and `Query.mutations` reach the mutation type below the root. */
function nestedSchema() {
  return paymentsSchema(
    /* GraphQL */ `
      type Mutation {
        v1: Mutation!
        pay(amount: Int!, idempotencyKey: String): Int! @idempotent
      }
      extend type Query {
        mutations: Mutation
      }
    `,
    { Mutation: { v1: () => ({}) }, Query: { mutations: () => ({}) } },
  );
}

describe('useIdempotency refuses an idempotent field it cannot key', () => {
  it.each([
    ['below another field', 'mutation { v1 { pay(amount: 5) } }'],
    ['below another field, with a key of its own', 'mutation { v1 { pay(amount: 5, idempotencyKey: "k") } }'],
    [
      'through a fragment spread below the root',
      'mutation { v1 { ...Pay } } fragment Pay on Mutation { pay(amount: 5, idempotencyKey: "k") }',
    ],
    [
      'through an inline fragment below the root',
      'mutation { v1 { ... on Mutation { pay(amount: 5, idempotencyKey: "k") } } }',
    ],
    ['from a query', 'query { mutations { pay(amount: 5, idempotencyKey: "k") } }'],
    ['next to a keyed root field', 'mutation { pay(amount: 1, idempotencyKey: "a") v1 { pay(amount: 5) } }'],
  ])('selected %s: 400 and IDEMPOTENCY_KEY_INVALID, every time, running nothing', async (_, query) => {
    const { schema, calls } = nestedSchema();
    const { send } = yogaFor(schema);
    const responses = [await send(query), await send(query)];

    for (const response of responses) {
      expect(response.status).toBe(400);
      expect(response.body.errors).toMatchObject([
        {
          message: expect.stringContaining('Mutation.pay is idempotent only as a root field of a mutation'),
          extensions: { code: 'IDEMPOTENCY_KEY_INVALID' },
        },
      ]);
    }
    expect(calls.pay).toBe(0);
  });

  it("refuses each operation of one document by its own selections, whichever was sent first (Yoga's parser cache hands both the same document)", async () => {
    const { schema, calls } = nestedSchema();
    const { yoga } = yogaFor(schema);
    const query =
      'mutation Root { pay(amount: 5, idempotencyKey: "k") } mutation Below { v1 { pay(amount: 5, idempotencyKey: "k") } }';
    const send = (operationName: string) =>
      postGraphQL((url, init) => Promise.resolve(yoga.fetch(url, init)), 'http://yoga/graphql', {
        query,
        operationName,
        userId: 'user-1',
      });

    const root = await send('Root');
    const below = await send('Below');
    const again = await send('Root');

    expect(root.status).toBe(200);
    expect(below.status).toBe(400);
    expect(below.body.data).toBeUndefined();
    expect(below.body.errors?.[0]?.message).toContain(
      'Mutation.pay is idempotent only as a root field of a mutation; select it there',
    );
    expect(again.status).toBe(200);
    expect(calls.pay).toBe(1);
  });

  it('runs it at the root, also through a fragment spread there', async () => {
    const { schema, calls } = nestedSchema();
    const { send } = yogaFor(schema);
    const query = 'mutation { ...Pay } fragment Pay on Mutation { pay(amount: 5, idempotencyKey: "k") }';
    await send(query);
    const retry = await send(query);

    expect(retry.body).toMatchObject({
      data: { pay: 5 },
      extensions: { idempotency: { pay: { replayed: true } } },
    });
    expect(calls.pay).toBe(1);
  });

  it('runs it below the root under an Idempotency-Key header, which covers the whole operation', async () => {
    const { schema, calls } = nestedSchema();
    const { send } = yogaFor(schema);
    await send('mutation { v1 { pay(amount: 5) } }', 'op');
    const retry = await send('mutation { v1 { pay(amount: 5) } }', 'op');

    expect(retry.status).toBe(200);
    expect(retry.body).toMatchObject({
      data: { v1: { pay: 5 } },
      extensions: { idempotency: { replayed: true } },
    });
    expect(calls.pay).toBe(1);
  });
});

describe('useIdempotency refuses an idempotent field reached from a subscription', () => {
  it('400 and IDEMPOTENCY_KEY_INVALID before the subscription starts: it would run on every event', async () => {
    const { schema, calls } = paymentsSchema(
      /* GraphQL */ `
        type Mutation {
          pay(amount: Int!, idempotencyKey: String): Int! @idempotent
        }
        type Subscription {
          ticks: Mutation
        }
      `,
      {
        Subscription: {
          ticks: {
            subscribe: async function* () {
              yield { ticks: {} };
              yield { ticks: {} };
            },
          },
        },
      },
    );
    const { yoga } = yogaFor(schema);
    const response = await yoga.fetch('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', 'x-user-id': 'user-1' },
      body: JSON.stringify({ query: 'subscription { ticks { pay(amount: 5, idempotencyKey: "k") } }' }),
    });
    const events = await response.text();

    expect(events).toContain('IDEMPOTENCY_KEY_INVALID');
    expect(events).toContain('Mutation.pay is idempotent only as a root field of a mutation');
    expect(calls.pay).toBe(0);
  });
});

describe('useIdempotency refuses a field key other than the header key', () => {
  it.each(['transactional', 'lease'] as const)(
    'in %s mode: 400 and IDEMPOTENCY_KEY_INVALID before any field runs, the key given inline or in a variable',
    async (mode) => {
      const notified: string[] = [];
      const { schema, calls } = paymentsSchema(
        /* GraphQL */ `
          type Mutation {
            notify(to: String!): Boolean!
            pay(amount: Int!, idempotencyKey: String): Int!
          }
        `,
        { Mutation: { notify: (_: unknown, { to }: { to: string }) => notified.push(to) > 0 } },
      );
      const { yoga } = yogaFor(schema, { mode });
      const send = (query: string, variables?: Record<string, unknown>) =>
        postGraphQL((url, init) => Promise.resolve(yoga.fetch(url, init)), 'http://yoga/graphql', {
          query,
          variables,
          userId: 'user-1',
          idempotencyKey: 'op',
        });
      // Fields run one after another: under a lease, `notify`'s e-mail would have gone out (and
      // go out again on every retry) before `pay` found that its key is not the header's.
      const responses = [
        await send('mutation { notify(to: "a@b") pay(amount: 5, idempotencyKey: "other") }'),
        await send('mutation ($key: String) { notify(to: "a@b") pay(amount: 5, idempotencyKey: $key) }', {
          key: 'other',
        }),
        await send(
          'mutation { notify(to: "a@b") ...Pay } fragment Pay on Mutation { pay(amount: 5, idempotencyKey: "x y") }',
        ),
      ];

      for (const response of responses) {
        expect(response.status).toBe(400);
        expect(response.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_INVALID' } }]);
      }
      expect(notified).toEqual([]);
      expect(calls.pay).toBe(0);
      // The header's own key, repeated in the argument, runs the operation.
      const same = await send('mutation { notify(to: "a@b") pay(amount: 5, idempotencyKey: "op") }');
      expect(same.body.data).toEqual({ notify: true, pay: 5 });
    },
  );
});

describe('useIdempotency refuses a header key over a field of another mode', () => {
  const leased = 'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(mode: LEASE) }';

  it('refuses an Idempotency-Key header on an operation with an @idempotent(mode: LEASE) field: 400, nothing runs', async () => {
    const { schema, calls } = paymentsSchema(leased);
    const { send } = yogaFor(schema);
    const response = await send('mutation { pay(amount: 1) }', 'op');

    expect(response.status).toBe(400);
    expect(response.body.errors).toMatchObject([
      {
        message: expect.stringContaining('Mutation.pay runs in lease mode'),
        extensions: { code: 'IDEMPOTENCY_KEY_INVALID' },
      },
    ]);
    expect(calls.pay).toBe(0);
    // Its own key still works.
    const keyed = await send('mutation { pay(amount: 1, idempotencyKey: "k") }');
    expect(keyed.body.data).toEqual({ pay: 1 });
  });

  it("runs it under the header when the plugin's mode: 'lease' runs header keys under a lease", async () => {
    const { schema, calls } = paymentsSchema(leased);
    const { send } = yogaFor(schema, { mode: 'lease' });
    await send('mutation { pay(amount: 1) }', 'op');
    const retry = await send('mutation { pay(amount: 1) }', 'op');

    expect(retry.body).toMatchObject({ data: { pay: 1 }, extensions: { idempotency: { replayed: true } } });
    expect(calls.pay).toBe(1);
  });

  it("refuses an @idempotent(mode: TRANSACTIONAL) field under a header when the plugin's mode is 'lease'", async () => {
    const { schema, calls } = paymentsSchema(
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(mode: TRANSACTIONAL) }',
    );
    const { send } = yogaFor(schema, { mode: 'lease' });
    const response = await send('mutation { pay(amount: 1) }', 'op');

    expect(response.status).toBe(400);
    expect(response.body.errors).toMatchObject([
      {
        message: expect.stringContaining('Mutation.pay runs in transactional mode'),
        extensions: { code: 'IDEMPOTENCY_KEY_INVALID' },
      },
    ]);
    expect(calls.pay).toBe(0);
  });
});

describe('useIdempotency refuses incremental delivery under a header key', () => {
  /** `receipt` counts its calls in `calls.pay`, as `pay` does. */
  function incrementalSchema() {
    const counted = paymentsSchema(
      /* GraphQL */ `
        type Receipt {
          amount: Int!
          note: String
          lines: [Int!]!
        }
        type Mutation {
          pay(amount: Int!, idempotencyKey: String): Int!
          receipt(amount: Int!): Receipt!
        }
      `,
      {
        Mutation: {
          receipt: (_: unknown, { amount }: { amount: number }) => {
            counted.calls.pay++;
            return { amount, note: 'paid', lines: [amount, amount] };
          },
        },
      },
    );
    return counted;
  }

  it.each([
    ['@defer on an inline fragment', 'mutation { receipt(amount: 1) { amount ... @defer { note } } }'],
    [
      '@defer on a fragment spread',
      'mutation { receipt(amount: 1) { amount ...Note @defer } } fragment Note on Receipt { note }',
    ],
    [
      '@defer inside a spread fragment',
      'mutation { ...Pay } fragment Pay on Mutation { receipt(amount: 1) { amount ... @defer { note } } }',
    ],
    ['@stream on a list field', 'mutation { receipt(amount: 1) { lines @stream } }'],
  ])('%s: 400 and IDEMPOTENCY_INPUT_UNSUPPORTED before anything runs, in either mode', async (_, query) => {
    for (const mode of ['transactional', 'lease'] as const) {
      const { schema, calls } = incrementalSchema();
      const { send } = yogaFor(schema, { mode }, { before: [useDeferStream()] });
      const responses = [await send(query, 'op'), await send(query, 'op')];

      for (const response of responses) {
        expect(response.status).toBe(400);
        expect(response.body.errors).toMatchObject([
          {
            message: expect.stringContaining('cannot use @defer or @stream'),
            extensions: { code: 'IDEMPOTENCY_INPUT_UNSUPPORTED' },
          },
        ]);
      }
      expect(calls.pay, mode).toBe(0);
    }
  });

  it('runs the same fields under a header key once without @defer, and replays them', async () => {
    const { schema, calls } = incrementalSchema();
    const { send } = yogaFor(schema, { mode: 'lease' }, { before: [useDeferStream()] });
    await send('mutation { receipt(amount: 1) { amount note } }', 'op');
    const retry = await send('mutation { receipt(amount: 1) { amount note } }', 'op');

    expect(retry.body).toMatchObject({
      data: { receipt: { amount: 1, note: 'paid' } },
      extensions: { idempotency: { replayed: true } },
    });
    expect(calls.pay).toBe(1);
  });
});
