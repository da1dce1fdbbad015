import { createSchema, createYoga } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';
import { countingReads } from '../helpers/counting-reads.js';

describe('useIdempotency and the Idempotency-Attempt header', () => {
  const { store, reads } = countingReads(memoryStore());
  let runs = 0;
  const yoga = createYoga({
    schema: createSchema({
      typeDefs: /* GraphQL */ `
        type Query {
          ping: Boolean
        }
        type Mutation {
          pay(amount: Int!, idempotencyKey: String): Int!
        }
      `,
      resolvers: { Mutation: { pay: () => ++runs } },
    }),
    logging: false,
    plugins: [useIdempotency({ store, scope: () => 'alice' })],
  });

  /** Posts `query` with these headers; returns the body and how many reads it cost. */
  async function post(query: string, headers: Record<string, string>) {
    const before = reads.count;
    const response = await yoga.fetch('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ query }),
    });
    const body = (await response.json()) as {
      data?: { pay: number } | null;
      extensions?: { idempotency?: Record<string, { replayed?: boolean } | boolean | string> };
      errors?: { extensions?: { code?: string } }[];
    };
    return { status: response.status, body, reads: reads.count - before };
  }

  const PAY = 'mutation { pay(amount: 1) }';
  const payKeyed = (key: string, amount = 1) =>
    `mutation { pay(amount: ${amount}, idempotencyKey: "${key}") }`;

  it('runs a fresh header key sent with Idempotency-Attempt: 1 without reading its record first', async () => {
    const before = runs;
    const sent = await post(PAY, { 'Idempotency-Key': 'op-fresh', 'Idempotency-Attempt': '1' });
    expect(sent).toMatchObject({
      status: 200,
      reads: 0,
      body: { extensions: { idempotency: { replayed: false } } },
    });
    expect(runs - before).toBe(1);
  });

  it('still replays the first result to a header key sent again with Idempotency-Attempt: 1', async () => {
    const headers = { 'Idempotency-Key': 'op-lying', 'Idempotency-Attempt': '1' };
    const first = await post(PAY, headers);
    const again = await post(PAY, headers);
    expect(again.reads).toBe(0);
    expect(again.body.data).toEqual(first.body.data);
    expect(again.body.extensions?.idempotency).toMatchObject({ replayed: true });
    const mismatch = await post('mutation { pay(amount: 2) }', headers);
    expect(mismatch.body.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_KEY_MISMATCH');
  });

  it('hints field-level keys alike: a fresh one runs unread, the same one again replays', async () => {
    const before = runs;
    const first = await post(payKeyed('field-1'), { 'Idempotency-Attempt': '1' });
    const again = await post(payKeyed('field-1'), { 'Idempotency-Attempt': '1' });
    expect([first.reads, again.reads]).toEqual([0, 0]);
    expect(again.body.data).toEqual(first.body.data);
    expect(again.body.extensions?.idempotency?.pay).toMatchObject({ replayed: true });
    expect(runs - before).toBe(1);
  });

  it.each(['2', '0', 'one', '1, 1', ''])(
    'reads the record first, as without the header, when Idempotency-Attempt is %j',
    async (value) => {
      const headers = { 'Idempotency-Key': `op-${value.replace(/\W/g, '_')}`, 'Idempotency-Attempt': value };
      const first = await post(PAY, headers);
      const again = await post(PAY, headers);
      expect([first.status, first.reads, again.reads]).toEqual([200, 1, 1]);
      expect(again.body.data).toEqual(first.body.data);
    },
  );
});
