import { buildSchema, type ExecutionResult, execute, parse, printSchema } from 'graphql';
import { createSchema } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { copySchema } from '../../src/envelop/schema-copy.js';

const typeDefs = /* GraphQL */ `
  directive @audit(level: Level = LOW) on FIELD_DEFINITION
  scalar Money
  enum Level {
    LOW
    HIGH
  }
  interface Node {
    id: ID!
  }
  type Card implements Node {
    id: ID!
    last4: String
  }
  type Iban implements Node {
    id: ID!
    country: String
  }
  union Method = Card | Iban
  input PayInput {
    amount: Money!
    method: ID = "card-1"
    nested: PayInput
  }
  type Query {
    node(id: ID!): Node
    methods: [Method!]!
  }
  type Mutation {
    v1: Mutation!
    pay(input: PayInput!, level: Level = HIGH): Method @audit(level: HIGH)
  }
`;

describe('copySchema', () => {
  it('prints exactly as the original, which keeps its own types and resolvers', () => {
    const schema = buildSchema(typeDefs);
    const copy = copySchema(schema, (_, __, resolve) => resolve);

    expect(printSchema(copy)).toBe(printSchema(schema));
    expect(copy.getMutationType()).not.toBe(schema.getMutationType());
    // The mutation type reachable from itself is the copy's, not the original's.
    expect(copy.getMutationType()!.getFields().v1!.type.toString()).toBe('Mutation!');
    expect(copy.getType('Mutation')).toBe(copy.getMutationType());
    expect(copy.getType('Money')).toBe(schema.getType('Money'));
  });

  it("runs the original's resolvers, resolveType and defaults, with the resolvers it chose", async () => {
    const seen: unknown[] = [];
    const schema = createSchema({
      typeDefs,
      resolvers: {
        Method: { __resolveType: (value: { last4?: string }) => (value.last4 ? 'Card' : 'Iban') },
        Mutation: {
          v1: () => ({}),
          pay: (_: unknown, args: unknown) => {
            seen.push(args);
            return { id: 'c', last4: '4242' };
          },
        },
      },
    });
    const original = schema.getMutationType()!.getFields().pay!.resolve;
    let wrapped = 0;
    const copy = copySchema(schema, (type, name, resolve) =>
      type.name === 'Mutation' && name === 'pay'
        ? (...args) => {
            wrapped++;
            return resolve!(...args);
          }
        : resolve,
    );
    const result = (await execute({
      schema: copy,
      document: parse('mutation { v1 { pay(input: { amount: 5 }) { ... on Card { last4 } } } }'),
    })) as ExecutionResult;

    expect(result).toEqual({ data: { v1: { pay: { last4: '4242' } } } });
    expect(seen).toEqual([{ input: { amount: 5, method: 'card-1' }, level: 'HIGH' }]);
    expect(wrapped).toBe(1);
    expect(schema.getMutationType()!.getFields().pay!.resolve).toBe(original);
    expect(copy.getMutationType()!.getFields().pay!.resolve).not.toBe(original);
  });
});
