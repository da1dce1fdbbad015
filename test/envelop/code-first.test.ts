import {
  type GraphQLFieldConfig,
  GraphQLInt,
  GraphQLNonNull,
  GraphQLObjectType,
  GraphQLSchema,
  GraphQLString,
} from 'graphql';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/index.js';
import { type Context, paymentsSchema, yogaFor } from './payments-yoga.js';

/**
 * A schema built in code (as graphql-js and Pothos build them, with no SDL to carry a
 * directive) whose `pay` mutation has the extensions given, counts its calls and can be held open.
 */
function codeFirstSchema(
  extensions: Record<string, unknown> | undefined,
  { keyArgument = true, onQuery = false } = {},
) {
  const calls = { pay: 0 };
  let gate: Promise<void> = Promise.resolve();
  const hold = () => {
    let release!: () => void;
    gate = new Promise((resolve) => (release = resolve));
    return () => release();
  };
  const pay: GraphQLFieldConfig<unknown, Context, { amount: number }> = {
    type: new GraphQLNonNull(GraphQLInt),
    args: {
      amount: { type: new GraphQLNonNull(GraphQLInt) },
      ...(keyArgument ? { idempotencyKey: { type: GraphQLString } } : {}),
    },
    extensions,
    resolve: async (_, { amount }) => {
      calls.pay++;
      await gate;
      return amount;
    },
  };
  const ping = { type: GraphQLInt, resolve: () => 1 };
  const schema = new GraphQLSchema({
    query: new GraphQLObjectType({ name: 'Query', fields: onQuery ? { ping, pay } : { ping } }),
    mutation: new GraphQLObjectType({ name: 'Mutation', fields: { pay } }),
  });
  return { schema, calls, hold };
}

describe('useIdempotency on a schema built in code: extensions.idempotent', () => {
  it('takes `true` as a bare @idempotent: a call without a key is refused whatever the plugin says, a retry replays', async () => {
    const { schema, calls } = codeFirstSchema({ idempotent: true });
    const { send } = yogaFor(schema, { required: false });

    const keyless = await send('mutation { pay(amount: 5) }');
    expect(keyless.body.errors?.[0]?.extensions).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' });
    await send('mutation { pay(amount: 5, idempotencyKey: "k-1") }');
    const retry = await send('mutation { pay(amount: 5, idempotencyKey: "k-1") }');
    expect(retry.body.extensions?.idempotency).toMatchObject({ pay: { key: 'k-1', replayed: true } });
    expect(calls.pay).toBe(1);
  });

  it('runs a call without a key, unrecorded, under required: false, whatever the plugin says', async () => {
    const { schema, calls } = codeFirstSchema({ idempotent: { required: false } });
    const { send } = yogaFor(schema, { required: true });
    expect((await send('mutation { pay(amount: 5) }')).body).toEqual({ data: { pay: 5 } });
    expect(calls.pay).toBe(1);
  });

  it('keeps a result for its ttlMs, thirty days here', async () => {
    const { schema } = codeFirstSchema({ idempotent: { ttlMs: 30 * 86_400_000 } });
    const store = memoryStore();
    const { send } = yogaFor(schema, { store });
    await send('mutation { pay(amount: 5, idempotencyKey: "month") }');

    const record = await store.find('user-1', 'month');
    expect(record!.expiresAt.getTime() - record!.completedAt!.getTime()).toBe(30 * 86_400_000);
  });

  it("runs under mode: 'lease' with its leaseMs, whatever the plugin says", async () => {
    const { schema, calls, hold } = codeFirstSchema({ idempotent: { mode: 'lease', leaseMs: 4_000 } });
    const store = memoryStore();
    const { send } = yogaFor(schema, { store, mode: 'transactional' });
    const release = hold();
    const first = send('mutation { pay(amount: 1, idempotencyKey: "leased") }');
    await expect.poll(() => calls.pay).toBe(1);
    const record = await store.find('user-1', 'leased');
    release();

    // Committed before the resolver ran, with that lease: a transaction's claim is unseen.
    expect(record!.lockedUntil!.getTime() - record!.createdAt.getTime()).toBe(4_000);
    expect((await first).body.data).toEqual({ pay: 1 });
  });

  it.each([
    [
      'a value that is neither true nor an object',
      { idempotent: 'yes' },
      'Mutation.pay: extensions.idempotent must be true or an object of required, ttlMs, mode and leaseMs (got "yes")',
    ],
    [
      'a member it does not take',
      { idempotent: { ttl: 1000 } },
      'Mutation.pay: extensions.idempotent has no ttl (it takes required, ttlMs, mode and leaseMs)',
    ],
    [
      'a mode in the enum’s spelling',
      { idempotent: { mode: 'LEASE' } },
      "Mutation.pay: extensions.idempotent.mode must be 'transactional' or 'lease' (got LEASE)",
    ],
    [
      'a required that is not a boolean',
      { idempotent: { required: 'true' } },
      'Mutation.pay: extensions.idempotent.required must be a boolean',
    ],
    [
      'a ttlMs given as text',
      { idempotent: { ttlMs: '60000' } },
      'Mutation.pay: extensions.idempotent.ttlMs must be an integer from 1 to 3155760000000 (a hundred years)',
    ],
    [
      'a ttlMs past a hundred years',
      { idempotent: { ttlMs: 1e15 } },
      'Mutation.pay: extensions.idempotent.ttlMs must be an integer from 1 to 3155760000000 (a hundred years)',
    ],
    [
      'a leaseMs with the transactional mode',
      { idempotent: { mode: 'transactional', leaseMs: 5000 } },
      "Mutation.pay: extensions.idempotent.leaseMs applies only with mode: 'lease'",
    ],
  ])('reports %s, naming the field', (_, extensions, message) => {
    const { schema } = codeFirstSchema(extensions);
    expect(() => yogaFor(schema)).toThrow(message);
  });

  it('reports a field declared both ways, by @idempotent and extensions.idempotent', () => {
    const { schema } = paymentsSchema(
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(ttlMs: 1000) }',
    );
    const pay = schema.getMutationType()!.getFields().pay!;
    (pay as { extensions: object }).extensions = { idempotent: { ttlMs: 2000 } };
    expect(() => yogaFor(schema)).toThrow(
      'Mutation.pay: declared by both @idempotent and extensions.idempotent; keep one',
    );
  });

  it('reports a declared field without the key argument, or outside the mutation root', () => {
    expect(() => yogaFor(codeFirstSchema({ idempotent: true }, { keyArgument: false }).schema)).toThrow(
      'Mutation.pay: extensions.idempotent needs an argument "idempotencyKey: String"',
    );
    expect(() => yogaFor(codeFirstSchema({ idempotent: true }, { onQuery: true }).schema)).toThrow(
      'Query.pay: extensions.idempotent applies only to fields of the mutation root type',
    );
  });
});
