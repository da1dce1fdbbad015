import { GraphQLError, GraphQLScalarType } from 'graphql';
import { describe, expect, it } from 'vitest';
import { memoryStore, type Store } from '../../src/index.js';
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
        wrapped(idempotencyKey: String): Int
        returned(idempotencyKey: String): Int
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
        // A GraphQLError wrapping an internal one: Yoga masks it.
        wrapped: () => {
          calls.decline++;
          throw new GraphQLError('declined: the gateway said sk_live_123 is revoked', {
            originalError: new Error('sk_live_123 is revoked'),
            extensions: { code: 'CARD_DECLINED' },
          });
        },
        // graphql-js answers an Error a resolver returns as the field's error, as if thrown.
        returned: () => {
          calls.decline++;
          thrown.push(new CardDeclined('card declined'));
          return thrown.at(-1);
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
    ['a field key', 'mutation { wrapped(idempotencyKey: "k") }', undefined],
    ['an Idempotency-Key header', 'mutation { wrapped }', 'k'],
  ])('masks a replayed error as Yoga masked the first answer, under %s', async (_, query, header) => {
    const { schema, calls } = declinesAndEchoes();
    const { send } = yogaFor(schema, { replayErrors: () => true });
    const first = await send(query, header);
    const retry = await send(query, header);

    expect(calls.decline).toBe(1);
    expect(first.body.errors).toMatchObject([
      { message: 'Unexpected error.', path: ['wrapped'], extensions: { code: 'INTERNAL_SERVER_ERROR' } },
    ]);
    expect(retry.body.errors).toMatchObject([
      { message: 'Unexpected error.', path: ['wrapped'], extensions: { code: 'INTERNAL_SERVER_ERROR' } },
    ]);
    expect(JSON.stringify(retry.body)).not.toContain('sk_live_123');
  });

  it('rolls back the writes of a keyless call (an optional key) whose resolver returns an Error, as with a key', async () => {
    const outcomes: string[] = [];
    const base = memoryStore();
    const store: Store<undefined> = {
      ...base,
      transaction: (work) =>
        base.transaction!(async (session) => {
          const result = await work(session).catch((error: unknown) => {
            outcomes.push('rolled back');
            throw error;
          });
          outcomes.push('committed');
          return result;
        }),
    };
    const { schema } = paymentsSchema(undefined, { Mutation: { pay: () => new Error('card declined') } });
    const { send } = yogaFor(schema, { store, required: false });
    for (const query of [
      'mutation { pay(amount: 5, idempotencyKey: "k-1") }',
      'mutation { pay(amount: 5) }',
    ]) {
      expect((await send(query)).body.errors).toHaveLength(1);
    }
    expect(outcomes).toEqual(['rolled back', 'rolled back']);
  });

  it('takes an Error the resolver returns for its error: judged by replayErrors, stored only as one', async () => {
    const { schema, thrown, calls } = declinesAndEchoes();
    const store = memoryStore();
    const offered: unknown[] = [];
    const { send } = yogaFor(schema, { store, replayErrors: (error) => offered.push(error) > 1 });
    const first = await send('mutation { returned(idempotencyKey: "k") }');

    // Not replayed: nothing stored, the key free again.
    expect(offered).toEqual([thrown[0]]);
    expect(first.body).toMatchObject({ data: { returned: null }, errors: [{ path: ['returned'] }] });
    expect(await store.find('user-1', 'k')).toBeNull();
    // Replayed (the second time `replayErrors` says so): stored as the error, not as a result.
    const second = await send('mutation { returned(idempotencyKey: "k") }');
    const retry = await send('mutation { returned(idempotencyKey: "k") }');
    expect(calls.decline).toBe(2);
    expect(await store.find('user-1', 'k')).toMatchObject({ status: 'COMPLETED', resultIsError: true });
    expect(retry.body).toMatchObject({
      data: { returned: null },
      errors: [{ message: second.body.errors![0]!.message }],
    });
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
