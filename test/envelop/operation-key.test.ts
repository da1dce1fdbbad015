import { envelop, useEngine, useSchema } from '@envelop/core';
import * as graphql from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';
import { movableClock } from '../helpers/clock.js';

/** Operation-level keys (the `Idempotency-Key` header) outside Yoga's own request handling. */
describe('a header key', () => {
  it('is read case-insensitively from a plain headers object that keeps the client’s spelling', async () => {
    let runs = 0;
    const schema = graphql.buildSchema(
      'type Query { ping: Boolean } type Mutation { pay(amount: Int!): Int! }',
    );
    const rootValue = {
      pay: ({ amount }: { amount: number }) => {
        runs++;
        return amount;
      },
    };
    const getEnveloped = envelop({
      plugins: [
        useEngine(graphql),
        useSchema(schema),
        useIdempotency({ store: memoryStore(), scope: (context: { userId: string }) => context.userId }),
      ],
    });
    const pay = async () => {
      const {
        execute,
        contextFactory,
        schema: enveloped,
        parse,
      } = getEnveloped({
        userId: 'alice',
        // An API Gateway event's headers, say: not lower-cased.
        req: { headers: { 'Idempotency-Key': 'k-1', 'Content-Type': 'application/json' } },
      });
      return (await execute({
        schema: enveloped,
        document: parse('mutation { pay(amount: 5) }'),
        rootValue,
        contextValue: await contextFactory(),
      })) as graphql.ExecutionResult;
    };
    expect((await pay()).extensions?.idempotency).toMatchObject({ key: 'k-1', replayed: false });
    expect((await pay()).extensions?.idempotency).toMatchObject({ key: 'k-1', replayed: true });
    expect(runs).toBe(1);
  });

  it('in lease mode, keeps a result too large to store as its error: a retry after the lease replays it', async () => {
    let sent = 0;
    const clock = movableClock();
    const schema = createSchema<{ userId: string }>({
      typeDefs: 'type Query { ping: Boolean } type Mutation { sendEmail(to: String!): String! }',
      resolvers: {
        Mutation: {
          sendEmail: (_: unknown, { to }: { to: string }) => {
            sent++; // the e-mail went out: nothing rolls it back
            return `sent to ${to} `.repeat(500);
          },
        },
      },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
      plugins: [
        useIdempotency({
          store: memoryStore({ clock: clock.now }),
          scope: (context: { userId: string }) => context.userId,
          mode: 'lease',
          leaseMs: 1_000,
          maxResultBytes: 1_000,
        }),
      ],
    });
    const send = async () => {
      const response = await yoga.fetch('http://yoga/graphql', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-user-id': 'alice', 'idempotency-key': 'k-1' },
        body: JSON.stringify({ query: 'mutation { sendEmail(to: "bob") }' }),
      });
      return ((await response.json()) as { errors?: { extensions?: { code?: string } }[] }).errors;
    };
    expect((await send())?.[0]?.extensions?.code).toBe('IDEMPOTENCY_RESULT_TOO_LARGE');
    clock.advance(2_000); // past the lease: a claim still in progress would be taken over
    expect((await send())?.[0]?.extensions?.code).toBe('IDEMPOTENCY_RESULT_TOO_LARGE');
    expect(sent).toBe(1);
  });
});
