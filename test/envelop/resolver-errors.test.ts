import { GraphQLScalarType } from 'graphql';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/index.js';
import { paymentsSchema, yogaFor } from './payments-yoga.js';

/** An error of the application's own, as the README's `replayErrors` example expects. */
class CardDeclined extends Error {
  readonly code = 'CARD_DECLINED';
}

/** `decline` throws a `CardDeclined`; `echo` returns the JSON it is given, whatever its keys. */
function declinesAndEchoes() {
  const thrown: Error[] = [];
  const calls = { decline: 0, echo: 0 };
  const { schema } = paymentsSchema(
    /* GraphQL */ `
      scalar JSON
      type Mutation {
        pay(amount: Int!, idempotencyKey: String): Int!
        decline(idempotencyKey: String): Int
        echo(json: String!, idempotencyKey: String): JSON
      }
    `,
    {
      JSON: { scalar: new GraphQLScalarType({ name: 'JSON', serialize: (value) => value }) },
      Mutation: {
        decline: () => {
          calls.decline++;
          thrown.push(new CardDeclined('card declined'));
          throw thrown.at(-1);
        },
        echo: (_: unknown, { json }: { json: string }) => {
          calls.echo++;
          return JSON.parse(json);
        },
      },
    },
  );
  return { schema, thrown, calls };
}

describe('useIdempotency and the errors of the resolver', () => {
  it.each([
    ['a field key', 'mutation { decline(idempotencyKey: "k") }', undefined],
    ['an Idempotency-Key header', 'mutation { decline }', 'k'],
  ])('offers replayErrors the error the resolver threw, under %s', async (_, query, header) => {
    const { schema, thrown, calls } = declinesAndEchoes();
    const offered: unknown[] = [];
    const { send } = yogaFor(schema, {
      replayErrors: (error) => {
        offered.push(error);
        return (error as { code?: unknown }).code === 'CARD_DECLINED';
      },
    });
    const first = await send(query, header);
    const retry = await send(query, header);

    expect(calls.decline).toBe(1);
    expect(offered).toHaveLength(1);
    expect(offered[0]).toBe(thrown[0]);
    // Yoga masks an error that is not a GraphQLError, the first time as on the replay.
    const { message } = first.body.errors![0]!;
    expect(first.body.errors).toMatchObject([{ path: ['decline'] }]);
    expect(retry.body.errors).toMatchObject([{ message, path: ['decline'] }]);
  });

  it.each([
    ['a field key', 'mutation { echo(json: "{\\"__proto__\\": 1}", idempotencyKey: "k") }', undefined],
    ['an Idempotency-Key header', 'mutation { echo(json: "{\\"__proto__\\": 1}") }', 'k'],
  ])(
    'answers a result that cannot be stored with 500 and IDEMPOTENCY_RESULT_UNSTORABLE under %s, storing nothing',
    async (_, query, header) => {
      const { schema, calls } = declinesAndEchoes();
      const store = memoryStore();
      const { send } = yogaFor(schema, { store });
      const response = await send(query, header);

      expect(response.status).toBe(500);
      expect(response.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_RESULT_UNSTORABLE' } }]);
      expect(await store.find('user-1', 'k')).toBeNull();
      expect(calls.echo).toBe(1);
    },
  );
});
