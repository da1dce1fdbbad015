import { createSchema, createYoga } from 'graphql-yoga';
import SuperJSON from 'superjson';
import { describe, expect, it } from 'vitest';
import { idempotentDirectiveTypeDefs, useIdempotency } from '../../src/envelop/index.js';
import { memoryStore, type Serializer } from '../../src/index.js';

/** A field key's result that graphql-js reads through code: a function member, or a class's getter. */
class Payment {
  constructor(readonly id: number) {}
  get amount() {
    return '5.00';
  }
}

/** A line of a payment, its name read through a getter. */
class Line {
  constructor(readonly sku: string) {}
  get name() {
    return `item ${this.sku}`;
  }
}

/** A list of lines of a class of its own, read through its iterator. */
class Lines {
  readonly all = [{ name: 'a' }];
  *[Symbol.iterator]() {
    yield* this.all;
  }
}

/** An entity of an ORM: fields of its own, and methods no field reads. */
class Entity {
  constructor(
    readonly id: number,
    readonly amount: string,
  ) {}
  save() {
    return this;
  }
  isLarge() {
    return Number(this.amount) > 100;
  }
}

function server(
  mode: 'TRANSACTIONAL' | 'LEASE',
  value: () => unknown,
  options: { serializer?: Serializer } = {},
) {
  let runs = 0;
  const schema = createSchema({
    typeDefs: [
      idempotentDirectiveTypeDefs,
      'type Query { ping: Boolean } type Line { name: String! } type Payment { id: Int!, amount: String, lines: [Line!] }',
      `type Mutation { pay(idempotencyKey: String): Payment! @idempotent(mode: ${mode}) }`,
    ],
    resolvers: {
      Mutation: {
        pay: () => {
          runs++;
          return value();
        },
      },
    },
  });
  const yoga = createYoga({
    schema,
    logging: false,
    plugins: [useIdempotency({ store: memoryStore(options), scope: () => 'alice' })],
  });
  const pay = async () => {
    const response = await yoga.fetch('http://localhost/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json' },
      body: JSON.stringify({ query: 'mutation { pay(idempotencyKey: "k-1") { id amount lines { name } } }' }),
    });
    return (await response.json()) as {
      data?: unknown;
      errors?: { message: string; extensions?: { code?: string } }[];
    };
  };
  return { pay, runs: () => runs };
}

describe('useIdempotency: a field key’s result that graphql-js reads through code', () => {
  it.each([
    ['a function member', () => ({ id: 1, amount: () => '5.00' }), /member "amount" is a function/],
    ['a class’s getter', () => new Payment(1), /an instance of Payment gets "amount" from its class/],
    ['a class’s getter inside a Set', () => ({ id: 1, lines: new Set([new Line('a')]) }), /Line gets "name"/],
    [
      'a function inside a Set, read as a list',
      () => ({ id: 1, lines: new Set([Object.defineProperty(() => undefined, 'name', { value: 'a' })]) }),
      /a function in a Set/,
    ],
    [
      'a class’s iterator, read as a list',
      () => ({ id: 1, lines: new Lines() }),
      /Lines gets "Symbol.iterator"/,
    ],
  ])(
    'refuses %s as unstorable: nothing commits, and no replay fails where the first call answered',
    async (_, value, why) => {
      const { pay, runs } = server('TRANSACTIONAL', value);
      for (let i = 0; i < 2; i++) {
        const { errors } = await pay();
        expect(errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_RESULT_UNSTORABLE');
        expect(errors?.[0]?.message).toMatch(why);
      }
      expect(runs()).toBe(2);
    },
  );

  it('keeps the refusal for the key in lease mode, where the effects stand: the retry gets it, and runs nothing', async () => {
    const { pay, runs } = server('LEASE', () => ({ id: 1, amount: () => '5.00' }));
    const first = await pay();
    expect(first.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_RESULT_UNSTORABLE');
    expect(await pay()).toEqual(first);
    expect(runs()).toBe(1);
  });

  it('stores a class instance whose fields are its own, as plain data', async () => {
    class Row {
      constructor(
        readonly id: number,
        readonly amount: string,
      ) {}
    }
    const { pay, runs } = server('TRANSACTIONAL', () => new Row(1, '5.00'));
    const first = await pay();
    expect(first.data).toEqual({ pay: { id: 1, amount: '5.00', lines: null } });
    expect((await pay()).data).toEqual(first.data);
    expect(runs()).toBe(1);
  });

  it('stores an entity whose class has methods no field reads, as plain data', async () => {
    const { pay, runs } = server('TRANSACTIONAL', () => new Entity(1, '5.00'));
    const first = await pay();
    expect(first.data).toEqual({ pay: { id: 1, amount: '5.00', lines: null } });
    expect((await pay()).data).toEqual(first.data);
    expect(runs()).toBe(1);
  });

  it('stores an instance of a class with a getter when the store’s serializer keeps the class', async () => {
    const superjson = new SuperJSON();
    superjson.registerClass(Payment, { identifier: 'Payment' });
    const serializer: Serializer = {
      serialize: (value) => superjson.stringify(value),
      deserialize: (text) => superjson.parse(text),
    };
    const { pay, runs } = server('TRANSACTIONAL', () => new Payment(1), { serializer });
    const first = await pay();
    expect(first).toEqual({
      data: { pay: { id: 1, amount: '5.00', lines: null } },
      extensions: expect.anything(),
    });
    expect((await pay()).data).toEqual(first.data);
    expect(runs()).toBe(1);
  });
});
