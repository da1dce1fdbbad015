import { envelop, type Plugin, useEngine, useSchema } from '@envelop/core';
import { useDeferStream } from '@graphql-yoga/plugin-defer-stream';
import * as graphql from 'graphql';
import { type GraphQLSchema, lexicographicSortSchema } from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { useIdempotency } from '../../src/envelop/index.js';
import { IdempotencyStoreUnavailableError, memoryStore, type Store } from '../../src/index.js';
import { postGraphQL } from './graphql-client.js';
import { type Context, paymentsSchema, yogaFor } from './payments-yoga.js';

describe('useIdempotency at schema build', () => {
  it.each([
    [
      'an @idempotent field without the key argument',
      'type Mutation { pay(amount: Int!): Int! @idempotent }',
      'Mutation.pay: @idempotent needs an argument "idempotencyKey: String"',
    ],
    [
      'a key argument that is not a String',
      'type Mutation { pay(amount: Int!, idempotencyKey: Int): Int! }',
      'Mutation.pay: the "idempotencyKey" argument must be a String (it is Int)',
    ],
    [
      'a key argument of type ID',
      'type Mutation { pay(amount: Int!, idempotencyKey: ID!): Int! @idempotent }',
      'Mutation.pay: the "idempotencyKey" argument must be a String (it is ID!)',
    ],
    [
      'a key argument with a default, which every keyless call would share',
      'type Mutation { pay(amount: Int!, idempotencyKey: String = "k"): Int! }',
      'Mutation.pay: the "idempotencyKey" argument must have no default value',
    ],
    [
      '@idempotent outside the mutation root',
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! } extend type Query { orders(idempotencyKey: String): Int @idempotent }',
      'Query.orders: @idempotent applies only to fields of the mutation root type',
    ],
    [
      'a ttlMs that is not positive',
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(ttlMs: 0) }',
      'Mutation.pay: @idempotent(ttlMs:) must be an integer from 1 to 3155760000000 (a hundred years)',
    ],
    [
      'a ttlMs that is no whole number of milliseconds',
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(ttlMs: 1.5) }',
      'Mutation.pay: @idempotent(ttlMs:) must be an integer from 1 to 3155760000000 (a hundred years)',
    ],
    [
      'a ttlMs past a hundred years',
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(ttlMs: 3155760000001) }',
      'Mutation.pay: @idempotent(ttlMs:) must be an integer from 1 to 3155760000000 (a hundred years)',
    ],
    [
      'a leaseMs that is not positive',
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(mode: LEASE, leaseMs: 0) }',
      'Mutation.pay: @idempotent(leaseMs:) must be an integer from 1 to 3155760000000 (a hundred years)',
    ],
    [
      'a leaseMs past a hundred years',
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(mode: LEASE, leaseMs: 1e13) }',
      'Mutation.pay: @idempotent(leaseMs:) must be an integer from 1 to 3155760000000 (a hundred years)',
    ],
    [
      'a leaseMs with mode: TRANSACTIONAL',
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(mode: TRANSACTIONAL, leaseMs: 5000) }',
      'Mutation.pay: @idempotent(leaseMs:) applies only with mode: LEASE',
    ],
    [
      'a leaseMs on a field the store’s default runs in transactional mode',
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(leaseMs: 5000) }',
      'Mutation.pay: leaseMs applies only in lease mode, and the field runs in transactional mode',
    ],
  ])('reports %s, naming the field', (_, typeDefs, message) => {
    const { schema } = paymentsSchema(typeDefs);
    expect(() => yogaFor(schema)).toThrow(message);
  });

  it('takes a leaseMs without a mode on a field the plugin’s options run in lease mode', () => {
    const { schema } = paymentsSchema(
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(leaseMs: 5000) }',
    );
    expect(() => yogaFor(schema, { mode: 'lease' })).not.toThrow();
  });

  it('reports @idempotent used in a schema that does not declare it (built without validating its SDL)', () => {
    const schema = graphql.buildSchema(
      'type Query { ping: Int } type Mutation { pay(amount: Int!, idempotencyKey: String): Int @idempotent(mode: LEASE) }',
      { assumeValidSDL: true },
    );
    expect(() => yogaFor(schema)).toThrow(
      'Mutation.pay: @idempotent is used but not declared: add idempotentDirectiveTypeDefs to the type definitions',
    );
  });

  it('accepts a key argument whose default is null, which is no key', async () => {
    const { schema, calls } = paymentsSchema(
      'type Mutation { pay(amount: Int!, idempotencyKey: String = null): Int! }',
    );
    const { send } = yogaFor(schema);
    await send('mutation { pay(amount: 5, idempotencyKey: "k-1") }');
    const retry = await send('mutation { pay(amount: 5, idempotencyKey: "k-1") }');
    expect(retry.body.extensions?.idempotency).toMatchObject({ pay: { key: 'k-1', replayed: true } });
    expect(calls.pay).toBe(1);
  });

  it('accepts String! as the key type and another argument name', async () => {
    const { schema, calls } = paymentsSchema('type Mutation { pay(amount: Int!, requestId: String!): Int! }');
    const { send } = yogaFor(schema, { argumentName: 'requestId' });
    await send('mutation { pay(amount: 5, requestId: "r-1") }');
    const retry = await send('mutation { pay(amount: 5, requestId: "r-1") }');

    expect(retry.body.extensions?.idempotency).toMatchObject({ pay: { key: 'r-1', replayed: true } });
    expect(calls.pay).toBe(1);
  });
});

describe('useIdempotency and mutations without an idempotent field', () => {
  it('runs them on the schema as it is, and keyed ones on its copy, as before', async () => {
    const schemas: { field: string; own: boolean }[] = [];
    const seen = (field: string, info: { schema: GraphQLSchema }) =>
      schemas.push({ field, own: info.schema === schema });
    const { schema } = paymentsSchema(
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! note(text: String!): String! }',
      {
        Mutation: {
          note: (
            _: unknown,
            { text }: { text: string },
            _context: unknown,
            info: { schema: GraphQLSchema },
          ) => {
            seen('note', info);
            return text;
          },
          pay: (
            _: unknown,
            { amount }: { amount: number },
            _context: unknown,
            info: { schema: GraphQLSchema },
          ) => {
            seen('pay', info);
            return amount;
          },
        },
      },
    );
    const { send } = yogaFor(schema);
    const note = await send('mutation { note(text: "hi") }');
    const paid = await send('mutation { pay(amount: 5, idempotencyKey: "k-1") note(text: "and") }');
    const retry = await send('mutation { pay(amount: 5, idempotencyKey: "k-1") }');

    expect(note.body).toEqual({ data: { note: 'hi' } });
    expect(paid.body.data).toEqual({ pay: 5, note: 'and' });
    expect(retry.body.extensions?.idempotency).toMatchObject({ pay: { key: 'k-1', replayed: true } });
    // An operation that selects an idempotent field runs on the plugin's copy, every field of it.
    expect(schemas).toEqual([
      { field: 'note', own: true },
      { field: 'pay', own: false },
      { field: 'note', own: false },
    ]);
  });
});

describe('useIdempotency and documents nobody validated', () => {
  // Trusted or persisted documents skip validation: an inline fragment on an interface the mutation
  // type implements, which does not declare the field, still runs Mutation.pay.
  const skipValidation: Plugin = { onValidate: ({ setResult }) => setResult([]) };
  const typeDefs =
    'interface Payable { x: Int } type Mutation implements Payable { x: Int pay(amount: Int!, idempotencyKey: String): Int! }';

  it.each([
    ['a root selection', 'mutation { pay(amount: 5, idempotencyKey: "k-1") }'],
    [
      'a fragment on an interface that does not declare it',
      'mutation { ... on Payable { pay(amount: 5, idempotencyKey: "k-1") } }',
    ],
  ])('still claims an idempotent field reached through %s', async (_name, query) => {
    const { schema, calls } = paymentsSchema(typeDefs);
    const { send } = yogaFor(schema, {}, { before: [skipValidation] });
    await send(query);
    const retry = await send(query);
    expect(retry.body.extensions?.idempotency).toMatchObject({ pay: { key: 'k-1', replayed: true } });
    expect(calls.pay).toBe(1);
  });
});

describe('useIdempotency errors', () => {
  it('answers a duplicate of a mutation still running with 409, IN_PROGRESS and Retry-After', async () => {
    const { schema, calls, hold } = paymentsSchema();
    const { send } = yogaFor(schema, { waitTimeoutMs: 100, retryAfterMs: 2_500 });
    const release = hold();
    const first = send('mutation { pay(amount: 1, idempotencyKey: "slow") }');
    await expect.poll(() => calls.pay).toBe(1);
    const duplicate = await send('mutation { pay(amount: 1, idempotencyKey: "slow") }');
    release();

    expect(duplicate.status).toBe(409);
    expect(duplicate.headers.get('retry-after')).toBe('3');
    expect(duplicate.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_IN_PROGRESS' } }]);
    expect((await first).body.data).toEqual({ pay: 1 });
    expect(calls.pay).toBe(1);
  });

  it.each([
    ['an unkeyed field', 'note(text: "hi")', 200, null],
    ['another keyed field', 'tip(amount: 2, idempotencyKey: "k-2")', 200, null],
    ['no other field', '', 409, '1'],
    ['itself again (execution merges the two)', 'pay(amount: 5, idempotencyKey: "k-1")', 409, '1'],
  ])(
    'answers 409 and Retry-After for a keyed field beside %s only when it is the operation’s only field',
    async (_name, beside, status, retryAfter) => {
      const { schema, calls, hold } = paymentsSchema(
        'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! tip(amount: Int!, idempotencyKey: String): Int! note(text: String!): String! }',
        { Mutation: { tip: (_: unknown, { amount }: { amount: number }) => amount, note: () => 'noted' } },
      );
      const { send } = yogaFor(schema, { waitTimeoutMs: 50 });
      const release = hold();
      const first = send('mutation { pay(amount: 5, idempotencyKey: "k-1") }');
      await expect.poll(() => calls.pay).toBe(1);
      // The other field runs first; then pay's key is still in progress.
      const duplicate = await send(`mutation { ${beside} pay(amount: 5, idempotencyKey: "k-1") }`);
      release();
      await first;
      expect(duplicate.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_IN_PROGRESS' } }]);
      // A 409 is retried by clients: after an unkeyed field ran, the retry would run it again.
      expect({ status: duplicate.status, retryAfter: duplicate.headers.get('retry-after') }).toEqual({
        status,
        retryAfter,
      });
    },
  );

  it('answers 409 and Retry-After for the only field when a fragment selects it again', async () => {
    const { schema, calls, hold } = paymentsSchema();
    const { send } = yogaFor(schema, { waitTimeoutMs: 50 });
    const release = hold();
    const first = send('mutation { pay(amount: 5, idempotencyKey: "k-1") }');
    await expect.poll(() => calls.pay).toBe(1);
    const duplicate = await send(
      'mutation { pay(amount: 5, idempotencyKey: "k-1") ...Pay } fragment Pay on Mutation { pay(amount: 5, idempotencyKey: "k-1") }',
    );
    release();
    await first;
    expect(duplicate.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_IN_PROGRESS' } }]);
    expect([duplicate.status, duplicate.headers.get('retry-after')]).toEqual([409, '1']);
    expect(calls.pay).toBe(1);
  });

  it('answers 409 and Retry-After for the only field when its key comes in a variable', async () => {
    const { schema, calls, hold } = paymentsSchema();
    const { yoga } = yogaFor(schema, { waitTimeoutMs: 50 });
    const send = (key: string) =>
      postGraphQL((url, init) => Promise.resolve(yoga.fetch(url, init)), 'http://yoga/graphql', {
        query: 'mutation Pay($key: String) { pay(amount: 5, idempotencyKey: $key) }',
        variables: { key },
        userId: 'user-1',
      });
    const release = hold();
    const first = send('k-1');
    await expect.poll(() => calls.pay).toBe(1);
    const duplicate = await send('k-1');
    release();
    await first;

    expect(duplicate.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_IN_PROGRESS' } }]);
    expect({ status: duplicate.status, retryAfter: duplicate.headers.get('retry-after') }).toEqual({
      status: 409,
      retryAfter: '1',
    });
  });

  it.each([
    [
      'a reused key beside another field',
      'tip(amount: 2, idempotencyKey: "k-2") pay(amount: 6, idempotencyKey: "k-1")',
      200,
      'IDEMPOTENCY_KEY_MISMATCH',
    ],
    ['a reused key alone', 'pay(amount: 6, idempotencyKey: "k-1")', 422, 'IDEMPOTENCY_KEY_MISMATCH'],
    [
      'a missing key beside an unkeyed field',
      'note(text: "hi") pay(amount: 1)',
      200,
      'IDEMPOTENCY_KEY_MISSING',
    ],
    ['a missing key alone', 'pay(amount: 1)', 400, 'IDEMPOTENCY_KEY_MISSING'],
  ])(
    'sets the response’s status by a field’s error only when nothing else ran: %s',
    async (_name, fields, status, code) => {
      const { schema } = paymentsSchema(
        'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! tip(amount: Int!, idempotencyKey: String): Int! note(text: String!): String! }',
        { Mutation: { tip: (_: unknown, { amount }: { amount: number }) => amount, note: () => 'noted' } },
      );
      const { send } = yogaFor(schema);
      await send('mutation { pay(amount: 5, idempotencyKey: "k-1") }');
      const answer = await send(`mutation { ${fields} }`);
      expect(answer.body.errors).toMatchObject([{ extensions: { code } }]);
      // A client that takes a 4xx for a failed request would drop the data of the field that ran.
      expect(answer.status).toBe(status);
    },
  );

  it('answers 503 and IDEMPOTENCY_STORE_UNAVAILABLE when the store is down, running nothing', async () => {
    const down = async (): Promise<never> => {
      throw new IdempotencyStoreUnavailableError();
    };
    const store: Store = {
      find: down,
      transaction: down,
      lease: { client: undefined, claim: down, extend: down, complete: down, release: down },
    };
    const { schema, calls } = paymentsSchema();
    const { send } = yogaFor(schema, { store });
    const fieldLevel = await send('mutation { pay(amount: 1, idempotencyKey: "k") }');
    const operationLevel = await send('mutation { pay(amount: 1) }', 'k');

    for (const response of [fieldLevel, operationLevel]) {
      expect(response.status).toBe(503);
      expect(response.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_STORE_UNAVAILABLE' } }]);
    }
    expect(calls.pay).toBe(0);
  });
});

describe('useIdempotency and Yoga request batching', () => {
  function batchingYoga() {
    const { schema, calls } = paymentsSchema();
    const yoga = createYoga({
      schema,
      batching: true,
      logging: false,
      context: () => ({ userId: 'user-1' }),
      plugins: [useIdempotency<Context>({ store: memoryStore(), scope: (context) => context.userId })],
    });
    const send = async (operations: { query: string }[], headers: Record<string, string> = {}) => {
      const response = await yoga.fetch('http://yoga/graphql', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(operations),
      });
      return (await response.json()) as { data?: unknown; errors?: { extensions?: { code?: string } }[] }[];
    };
    return { send, calls };
  }

  it('refuses one Idempotency-Key header on a batch of several mutations, running none', async () => {
    const { send, calls } = batchingYoga();
    const pay = { query: 'mutation { pay(amount: 5) }' };
    const results = await send([pay, pay], { 'idempotency-key': 'batch-1' });
    expect(results).toHaveLength(2);
    for (const result of results) {
      expect(result.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_INVALID' } }]);
    }
    expect(calls.pay).toBe(0);
  });

  it('keys each mutation of a batch by its own argument, and a batch of one by the header', async () => {
    const { send, calls } = batchingYoga();
    const results = await send([
      { query: 'mutation { pay(amount: 1, idempotencyKey: "a") }' },
      { query: 'mutation { pay(amount: 2, idempotencyKey: "b") }' },
    ]);
    expect(results.map((r) => r.data)).toEqual([{ pay: 1 }, { pay: 2 }]);
    const single = await send([{ query: 'mutation { pay(amount: 3) }' }], { 'idempotency-key': 'one' });
    expect(single.map((r) => r.data)).toEqual([{ pay: 3 }]);
    expect(calls.pay).toBe(3);
  });
});

describe('useIdempotency modes', () => {
  it('runs a field under @idempotent(mode: LEASE, leaseMs:) with that lease, whatever the plugin says', async () => {
    const { schema, calls, hold } = paymentsSchema(
      'type Mutation { pay(amount: Int!, idempotencyKey: String): Int! @idempotent(mode: LEASE, leaseMs: 4000) }',
    );
    const store = memoryStore();
    const { send } = yogaFor(schema, { store, mode: 'transactional', waitTimeoutMs: 60_000 });
    const release = hold();
    const first = send('mutation { pay(amount: 1, idempotencyKey: "leased") }');
    await expect.poll(() => calls.pay).toBe(1);
    const record = await store.find('user-1', 'leased');
    const duplicate = send('mutation { pay(amount: 1, idempotencyKey: "leased") }');
    release();

    // Committed before the resolver ran, with the directive's lease: a transaction's claim is unseen.
    expect(record!.lockedUntil!.getTime() - record!.createdAt.getTime()).toBe(4_000);
    expect((await first).body.data).toEqual({ pay: 1 });
    expect((await duplicate).body.data).toEqual({ pay: 1 });
    expect(calls.pay).toBe(1);
  });

  it("runs header-keyed operations in lease mode when the plugin's mode is 'lease'", async () => {
    const { schema, calls, hold } = paymentsSchema();
    const store = memoryStore();
    const { send } = yogaFor(schema, { store, mode: 'lease', leaseMs: 3_000, waitTimeoutMs: 60_000 });
    const release = hold();
    const first = send('mutation { pay(amount: 2) }', 'op-lease');
    await expect.poll(() => calls.pay).toBe(1);
    const record = await store.find('user-1', 'op-lease');
    const duplicate = send('mutation { pay(amount: 2) }', 'op-lease');
    release();

    // Committed before the resolver ran, with the plugin's lease: a transaction's claim is unseen.
    expect(record!.lockedUntil!.getTime() - record!.createdAt.getTime()).toBe(3_000);
    expect((await first).body.data).toEqual({ pay: 2 });
    expect((await duplicate).body.data).toEqual({ pay: 2 });
    expect(calls.pay).toBe(1);
  });

  it("runs header-keyed operations in a transaction when the plugin says so, whatever the store's default mode", async () => {
    const leasing = memoryStore({ mode: 'lease' });
    let transactions = 0;
    let reads = 0;
    const store: Store = {
      defaults: leasing.defaults,
      lease: leasing.lease,
      find: (scope, key) => {
        reads++;
        return leasing.find(scope, key);
      },
      transaction: (work) => {
        transactions++;
        return leasing.transaction!(work);
      },
    };
    const { schema, calls, hold } = paymentsSchema();
    // Without mode: 'transactional' the header key is refused: pay would run under a lease with a
    // key of its own (test/envelop/unkeyed-effects.test.ts).
    const { send } = yogaFor(schema, { store, waitTimeoutMs: 60_000, mode: 'transactional' });
    const release = hold();
    const first = send('mutation { pay(amount: 3) }', 'op-tx');
    await expect.poll(() => calls.pay).toBe(1);
    expect(transactions).toBe(1);
    // Transactional: the duplicate waits for the holder in this process (no read, no transaction
    // of its own while it waits) and then replays, instead of a 409.
    const duplicate = send('mutation { pay(amount: 3) }', 'op-tx');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(reads).toBe(1);
    expect(transactions).toBe(1);
    release();

    expect((await first).body.extensions?.idempotency).toMatchObject({ replayed: false });
    const replay = await duplicate;
    expect(replay.status).toBe(200);
    expect(replay.body).toMatchObject({ data: { pay: 3 }, extensions: { idempotency: { replayed: true } } });
    expect(calls.pay).toBe(1);
  });
});

describe('useIdempotency among other plugins', () => {
  /** Wraps execution as tracing plugins do, and reports in the result's extensions. */
  const tracing: Plugin = {
    onExecute({ executeFn, setExecuteFn }) {
      setExecuteFn((args) => executeFn(args));
      return {
        onExecuteDone({ result, setResult }) {
          const single = result as graphql.ExecutionResult;
          setResult({ ...single, extensions: { ...single.extensions, traced: true } });
        },
      };
    },
  };
  /** Replaces the schema with a rebuilt copy, resolvers carried over, as schema-transforming plugins do. */
  const rebuilding = (): Plugin => {
    const rebuilt = new WeakSet<GraphQLSchema>();
    return {
      onSchemaChange({ schema, replaceSchema }) {
        if (rebuilt.has(schema)) return;
        const copy = lexicographicSortSchema(schema);
        rebuilt.add(copy);
        replaceSchema(copy);
      },
    };
  };

  it.each(['before', 'after'] as const)(
    'runs once per key with tracing and schema-rebuilding plugins %s it',
    async (place) => {
      const { schema, calls } = paymentsSchema();
      const { send } = yogaFor(schema, {}, { [place]: [tracing, rebuilding()] });
      const field = 'mutation { pay(amount: 7, idempotencyKey: "f") }';
      const first = await send(field);
      const retry = await send(field);
      const operation = 'mutation { pay(amount: 8) }';
      const opFirst = await send(operation, 'op');
      const opRetry = await send(operation, 'op');

      expect(first.body.data).toEqual({ pay: 7 });
      expect(first.body.extensions).toMatchObject({
        traced: true,
        idempotency: { pay: { replayed: false } },
      });
      expect(retry.body.data).toEqual({ pay: 7 });
      expect(retry.body.extensions).toMatchObject({ traced: true, idempotency: { pay: { replayed: true } } });
      expect(opFirst.body.data).toEqual({ pay: 8 });
      expect(opFirst.body.extensions).toMatchObject({
        traced: true,
        idempotency: { key: 'op', replayed: false },
      });
      expect(opRetry.body.extensions).toMatchObject({
        traced: true,
        idempotency: { key: 'op', replayed: true },
      });
      expect(calls.pay).toBe(2);
    },
  );
});

describe('useIdempotency on a plain Envelop server', () => {
  it('reads the header from a Node request on context.req and hands the transaction over as txName', async () => {
    const seen: unknown[] = [];
    const schema = createSchema<Context>({
      typeDefs: 'type Query { ping: Boolean } type Mutation { pay(amount: Int!): Int! }',
      resolvers: {
        Mutation: {
          pay: (_: unknown, { amount }: { amount: number }, context: Context) => {
            seen.push('db' in context);
            return amount;
          },
        },
      },
    });
    const getEnveloped = envelop({
      plugins: [
        useEngine(graphql),
        useSchema(schema),
        useIdempotency<Context>({ store: memoryStore(), scope: () => 'user-1', txName: 'db' }),
      ],
    });
    const run = async () => {
      const req = { headers: { 'idempotency-key': 'node-key' } };
      const { parse, contextFactory, execute, schema } = getEnveloped({ req });
      return execute({
        schema,
        document: parse('mutation { pay(amount: 3) }'),
        contextValue: await contextFactory(),
      }) as Promise<graphql.ExecutionResult>;
    };
    await run();
    const retry = await run();

    expect(retry.data).toEqual({ pay: 3 });
    expect(retry.extensions?.idempotency).toMatchObject({ key: 'node-key', replayed: true });
    expect(seen).toEqual([true]);
  });
});

describe('useIdempotency and one context shared by executions', () => {
  it('hands the resolver a context whose copy holds the shared one’s symbol-keyed members too', async () => {
    const span = Symbol('span');
    const schema = createSchema<Context>({
      typeDefs:
        'type Query { ping: Boolean } type Mutation { pay(amount: Int!, idempotencyKey: String): String }',
      resolvers: {
        Mutation: {
          pay: (_: unknown, __: unknown, context: object) => String({ ...context }[span as never]),
        },
      },
    });
    const getEnveloped = envelop({
      plugins: [
        useEngine(graphql),
        useSchema(schema),
        useIdempotency({ store: memoryStore(), scope: () => 'u' }),
      ],
    });
    const { execute, parse } = getEnveloped();
    const result = (await execute({
      schema,
      document: parse('mutation { pay(amount: 1, idempotencyKey: "s") }'),
      contextValue: { userId: 'u', [span]: 'span-1' },
    })) as graphql.ExecutionResult;
    expect(result.data).toEqual({ pay: 'span-1' });
  });

  it('keeps each execution to itself, and writes nothing on the context', async () => {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    const schema = createSchema<Context>({
      typeDefs: /* GraphQL */ `
        type Query {
          ping: Boolean
        }
        type Mutation {
          slow: Boolean
          pay(amount: Int!, idempotencyKey: String): Int!
        }
      `,
      resolvers: {
        Mutation: {
          slow: () => opened.then(() => true),
          pay: (_: unknown, { amount }: { amount: number }) => amount,
        },
      },
    });
    const getEnveloped = envelop({
      plugins: [
        useEngine(graphql),
        useSchema(schema),
        useIdempotency({ store: memoryStore(), scope: () => 'u' }),
      ],
    });
    const { execute, parse } = getEnveloped();
    // A graphql-ws connection's static context, say: one object for every operation.
    const context = { userId: 'u' };
    const run = (query: string) =>
      execute({ schema, document: parse(query), contextValue: context }) as Promise<graphql.ExecutionResult>;
    const first = run('mutation { slow pay(amount: 1, idempotencyKey: "a") }');
    await new Promise((resolve) => setTimeout(resolve, 10));
    const second = await run('mutation { pay(amount: 2, idempotencyKey: "b") }');
    open();

    expect(second.extensions?.idempotency).toMatchObject({ pay: { key: 'b', replayed: false } });
    expect((await first).extensions?.idempotency).toMatchObject({ pay: { key: 'a', replayed: false } });
    expect(Reflect.ownKeys(context)).toEqual(['userId']);
  });
});

describe('useIdempotency and what graphql-js does with a resolver’s value', () => {
  /** Sends `query` twice: the first call answers `data`, and the second replays it. */
  async function expectReplayed(send: ReturnType<typeof yogaFor>['send'], query: string, data: object) {
    const first = await send(query);
    const retry = await send(query);
    const [field] = Object.keys(data);
    expect(first.body.data).toEqual(data);
    expect(retry.body).toMatchObject({ data, extensions: { idempotency: { [field!]: { replayed: true } } } });
  }

  it('awaits the promises in a result before storing it: the replay is what the first call answered', async () => {
    const { schema, calls } = paymentsSchema(
      /* GraphQL */ `
        type Line {
          id: Int!
          total: Int
        }
        type Mutation {
          pay(amount: Int!, idempotencyKey: String): Int!
          lines(idempotencyKey: String): [Line!]!
        }
      `,
      {
        Mutation: {
          // A list of promises, and a promise in a field, as a DataLoader gives them.
          lines: () => {
            calls.pay++;
            return [Promise.resolve({ id: 1, total: 5 }), { id: 2, total: Promise.resolve(7) }];
          },
        },
      },
    );
    const { send } = yogaFor(schema);
    const lines = [
      { id: 1, total: 5 },
      { id: 2, total: 7 },
    ];
    await expectReplayed(send, 'mutation { lines(idempotencyKey: "k") { id total } }', { lines });
    expect(calls.pay).toBe(1);
  });

  it('awaits a promise in a plain object the result holds twice, in both places', async () => {
    const { schema, calls } = paymentsSchema(
      /* GraphQL */ `
        type Author {
          name: String!
        }
        type Post {
          title: String!
          author: Author!
        }
        type Mutation {
          pay(amount: Int!, idempotencyKey: String): Int!
          publish(idempotencyKey: String): [Post!]!
        }
      `,
      {
        Mutation: {
          publish: () => {
            calls.pay++;
            // One author for both posts, its name a DataLoader's promise.
            const author = { name: Promise.resolve('ann') };
            return [
              { title: 'one', author },
              { title: 'two', author },
            ];
          },
        },
      },
    );
    const { send } = yogaFor(schema);
    const publish = [
      { title: 'one', author: { name: 'ann' } },
      { title: 'two', author: { name: 'ann' } },
    ];
    await expectReplayed(send, 'mutation { publish(idempotencyKey: "k") { title author { name } } }', {
      publish,
    });
    expect(calls.pay).toBe(1);
  });

  it('reads an iterator the resolver returns (a generator, map.values()) into the list it stores', async () => {
    const { schema, calls } = paymentsSchema(
      /* GraphQL */ `
        type Batch {
          ids: [Int!]!
        }
        type Mutation {
          pay(amount: Int!, idempotencyKey: String): Int!
          generated(idempotencyKey: String): [Int!]!
          batch(idempotencyKey: String): Batch!
        }
      `,
      {
        Mutation: {
          generated: function* () {
            calls.pay++;
            yield 1;
            yield 2;
          },
          batch: () => {
            calls.pay++;
            return {
              ids: new Map<string, unknown>([
                ['a', Promise.resolve(1)],
                ['b', 2],
              ]).values(),
            };
          },
        },
      },
    );
    const { send } = yogaFor(schema);
    await expectReplayed(send, 'mutation { generated(idempotencyKey: "g") }', { generated: [1, 2] });
    await expectReplayed(send, 'mutation { batch(idempotencyKey: "b") { ids } }', { batch: { ids: [1, 2] } });
    expect(calls.pay).toBe(2);
  });

  it('says which fields it recorded with @defer too, first call and replay', async () => {
    const { schema, calls } = paymentsSchema(
      /* GraphQL */ `
        type Receipt {
          id: Int!
          note: String
        }
        type Mutation {
          pay(amount: Int!, idempotencyKey: String): Int!
          receipt(idempotencyKey: String): Receipt!
        }
      `,
      {
        Mutation: {
          receipt: () => {
            calls.pay++;
            return { id: 1, note: 'paid' };
          },
        },
      },
    );
    const { yoga } = yogaFor(schema, {}, { before: [useDeferStream()] });
    const send = async () => {
      const response = await yoga.fetch('http://yoga/graphql', {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'multipart/mixed', 'x-user-id': 'user-1' },
        body: JSON.stringify({
          query: 'mutation { receipt(idempotencyKey: "k") { id ... @defer { note } } }',
        }),
      });
      return response.text();
    };
    const first = await send();
    const retry = await send();

    expect(first).toContain('"idempotency":{"receipt":{"key":"k","replayed":false');
    expect(retry).toContain('"idempotency":{"receipt":{"key":"k","replayed":true');
    expect(retry).toContain('"note":"paid"');
    expect(calls.pay).toBe(1);
  });
});
