import { createSchema, createYoga } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { idempotentFetch } from '../../src/client/index.js';
import { idempotentDirectiveTypeDefs, useIdempotency } from '../../src/envelop/index.js';
import { IdempotencyStoreUnavailableError, memoryStore, type Store } from '../../src/index.js';

const post = (query: string, headers: Record<string, string> = {}) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify({ query }),
});

describe('effects a key does not cover never run again', () => {
  it('refuses a mutation field selected below a keyed root field, which would run on every retry', async () => {
    const runs = { pay: 0, notify: 0 };
    const schema = createSchema<{ userId: string }>({
      typeDefs: [
        'type Query { ping: Boolean }',
        'type Payment { amount: Int!, next: Mutation! }',
        'type Mutation { pay(amount: Int!, idempotencyKey: String): Payment! notify(to: String!): Boolean }',
      ],
      resolvers: {
        Payment: { next: () => ({}) },
        Mutation: {
          pay: (_: unknown, { amount }: { amount: number }) => {
            runs.pay++;
            return { amount };
          },
          notify: () => {
            runs.notify++;
            return true;
          },
        },
      },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      context: () => ({ userId: 'u' }),
      plugins: [useIdempotency({ store: memoryStore(), scope: (c: { userId: string }) => c.userId })],
    });
    let attempts = 0;
    const fetchLosingTheFirstResponse = idempotentFetch(
      async (input, init) => {
        const response = await yoga.fetch(String(input), init as RequestInit);
        if (++attempts === 1) throw new TypeError('fetch failed');
        return response;
      },
      { retry: { baseDelayMs: 1 } },
    );
    const response = await fetchLosingTheFirstResponse(
      'http://yoga/graphql',
      post('mutation { pay(amount: 1, idempotencyKey: "k") { amount next { notify(to: "bob") } } }'),
    );
    const body = (await response.json()) as { errors?: { extensions?: { code?: string } }[] };
    expect(body.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_KEY_INVALID');
    expect(runs).toEqual({ pay: 0, notify: 0 });
  });

  it('never retries a response in which one field’s outcome is unknown, even beside a 503', async () => {
    const runs: Record<string, number> = {};
    const schema = createSchema<{ userId: string }>({
      typeDefs: [
        idempotentDirectiveTypeDefs,
        'type Query { ping: Boolean }',
        'type Mutation { charge(amount: Int!, idempotencyKey: String): Int @idempotent(mode: LEASE) }',
      ],
      resolvers: {
        Mutation: {
          charge: (_: unknown, { amount, idempotencyKey }: { amount: number; idempotencyKey: string }) => {
            runs[idempotencyKey] = (runs[idempotencyKey] ?? 0) + 1; // the gateway charged
            return amount;
          },
        },
      },
    });
    // During the first attempt the database fails: k1's result cannot be stored (its outcome is
    // unknown, 500), and k2 cannot be claimed (503, nothing ran). Yoga answers the highest status.
    const base = memoryStore({ leaseMs: 300 });
    let down = true;
    const store: Store<undefined> = {
      ...base,
      lease: {
        ...base.lease,
        claim: async (claim) => {
          if (down && claim.key === 'k2') throw new IdempotencyStoreUnavailableError('down');
          return base.lease.claim(claim);
        },
        complete: async (completion) => {
          if (down && completion.key === 'k1') throw new Error('the write failed');
          return base.lease.complete(completion);
        },
      },
    };
    const yoga = createYoga({
      schema,
      logging: false,
      context: () => ({ userId: 'u' }),
      plugins: [useIdempotency({ store, scope: (c: { userId: string }) => c.userId })],
    });
    const statuses: number[] = [];
    const client = idempotentFetch(
      async (input, init) => {
        const response = await yoga.fetch(String(input), init as RequestInit);
        statuses.push(response.status);
        down = false;
        return response;
      },
      { retry: { attempts: 5, baseDelayMs: 400, maxDelayMs: 1_000 } },
    );
    await client(
      'http://yoga/graphql',
      post(
        'mutation { a: charge(amount: 1, idempotencyKey: "k1") b: charge(amount: 2, idempotencyKey: "k2") }',
      ),
    );
    // One answer, not retried: beside another field neither the 503 nor k1's 500 sets the
    // response's status, and the client reads every error's code besides.
    expect(statuses).toEqual([200]);
    expect(runs.k1).toBe(1);
  }, 20_000);

  it('refuses a header key when a field would run in another mode by the store’s default', async () => {
    const base = memoryStore({ mode: 'lease' });
    let transactions = 0;
    const store: Store<undefined> = {
      ...base,
      transaction: (work) => {
        transactions++;
        return base.transaction!(work);
      },
    };
    const schema = createSchema<{ userId: string }>({
      typeDefs: [
        'type Query { ping: Boolean }',
        'type Mutation { charge(amount: Int!, idempotencyKey: String): Int }',
      ],
      resolvers: { Mutation: { charge: (_: unknown, { amount }: { amount: number }) => amount } },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      context: () => ({ userId: 'u' }),
      plugins: [useIdempotency({ store, scope: (c: { userId: string }) => c.userId })],
    });
    const keyed = await yoga.fetch(
      'http://yoga/graphql',
      post('mutation { charge(amount: 1, idempotencyKey: "f1") }'),
    );
    expect(keyed.status).toBe(200);
    const underHeader = await yoga.fetch(
      'http://yoga/graphql',
      post('mutation { charge(amount: 1) }', { 'idempotency-key': 'h1' }),
    );
    const body = (await underHeader.json()) as { errors?: { extensions?: { code?: string } }[] };
    expect(body.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_KEY_INVALID');
    expect(transactions).toBe(0);
  });
});
