import fc from 'fast-check';
import { getOperationAST, parse } from 'graphql';
import { describe, expect, it } from 'vitest';
import { operationTypeOf, passesArgument } from '../../src/client/graphql-document.js';

describe('operationTypeOf', () => {
  it.each([
    ['{ payments { id } }', undefined, 'query'],
    ['query { a }', undefined, 'query'],
    ['mutation { createPayment { id } }', undefined, 'mutation'],
    ['subscription OnPay { paid }', undefined, 'subscription'],
    ['mutation Pay($a: String = "{ query") @tag(name: "}") { pay(a: $a) }', undefined, 'mutation'],
    ['mutation($in: In = { nested: [{ x: "]" }] }) { pay(in: $in) }', undefined, 'mutation'],
    ['# mutation { pay }\nquery Q { a }', undefined, 'query'],
    ['query Q { a(text: """ mutation { b } \\""" still inside """) }', undefined, 'query'],
    ['mutation M { a(text: "# not a comment") }', undefined, 'mutation'],
    ['fragment F on Payment { id }\nmutation Pay { pay { ...F } }', undefined, 'mutation'],
    ['mutation Pay { pay { ...F } } fragment F on Payment { id }', undefined, 'mutation'],
    ['query Q { a } mutation M { b }', 'M', 'mutation'],
    ['query Q { a } mutation M { b }', 'Q', 'query'],
    ['mutation queryPayments { a }', undefined, 'mutation'],
  ] as const)('reads %j (operationName %s) as a %s', (document, operationName, expected) => {
    expect(operationTypeOf(document, operationName)).toBe(expected);
  });

  it.each([
    ['several operations and no operationName', 'query Q { a } mutation M { b }', undefined],
    ['an operationName the document lacks', 'mutation M { b }', 'Other'],
    ['only fragments', 'fragment F on T { id }', undefined],
    ['an unbalanced document', 'mutation M { b ', undefined],
    ['an unterminated string', 'mutation M { b(x: "oops) }', undefined],
    ['an empty document', '', undefined],
  ])('cannot tell with %s', (_, document, operationName) => {
    expect(operationTypeOf(document, operationName)).toBeUndefined();
  });

  it('agrees with graphql-js on generated documents with comments, strings and fragments', () => {
    const name = fc.constantFrom('A', 'Pay', 'query', 'mutation', 'subscription', 'fragment', 'on', 'x_1');
    const text = fc.constantFrom('plain', '{', '}', 'mutation { x }', '#', '\\"', '(', ']');
    const value = fc.oneof(
      text.map((t) => JSON.stringify(t)),
      fc.constantFrom('plain', '{ mutation }', '\\""" escaped', '# no comment').map((t) => `"""${t}"""`),
      fc.constant('{ nested: [1, "}"] }'),
    );
    const comment = fc.oneof(
      fc.constant(''),
      text.map((t) => `# ${t}\n`),
    );
    const selection = fc
      .tuple(name, value, comment)
      .map(([field, arg, note]) => `{ ${field}(arg: ${arg}) ${note} }`);
    const operation = fc
      .tuple(fc.constantFrom('query', 'mutation', 'subscription'), fc.option(name), comment, selection, value)
      .map(([type, opName, note, body, dflt]) => ({
        type,
        name: opName ?? undefined,
        text: `${note}${type} ${opName ?? ''}($v: In = ${dflt}) @d(x: ${dflt}) ${body}`,
      }));
    const fragment = fc.tuple(name, selection).map(([n, body]) => `fragment F${n} on T ${body}`);
    fc.assert(
      fc.property(
        fc.array(operation, { minLength: 1, maxLength: 3 }),
        fc.array(fragment, { maxLength: 2 }),
        fc.boolean(),
        (operations, fragments, byName) => {
          const document = [...fragments, ...operations.map((o) => o.text)].join('\n');
          const operationName = byName ? operations[0]!.name : undefined;
          const expected = getOperationAST(parse(document, { noLocation: true }), operationName)?.operation;
          expect(operationTypeOf(document, operationName)).toBe(expected);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('passesArgument', () => {
  it.each([
    ['mutation { createOrder(idempotencyKey: "k") { id } }', true],
    ['mutation M($key: String) { createOrder(idempotencyKey: $key) { id } }', true],
    ['mutation { a: createOrder(input: { sku: "x" }, idempotencyKey: "k") { id } }', true],
    ['mutation { createOrder(input: { idempotencyKey: "k" }) { id } }', true],
    ['mutation M($idempotencyKey: String) { createOrder(key: $idempotencyKey) { id } }', false],
    ['mutation { idempotencyKey: createOrder { id } }', false],
    ['mutation { createOrder(note: "idempotencyKey: k") { id } } # idempotencyKey: k', false],
    ['mutation { createOrder(idempotencyKeys: "k") { id } }', false],
  ])('%j → %s', (document, expected) => {
    expect(passesArgument(document, 'idempotencyKey', { key: 'k' })).toBe(expected);
  });

  it.each([
    ['mutation { createOrder(idempotencyKey: null) { id } }', {}, false],
    ['mutation M($key: String) { createOrder(idempotencyKey: $key) { id } }', {}, false],
    ['mutation M($key: String) { createOrder(idempotencyKey: $key) { id } }', { key: null }, false],
    ['mutation M($key: String) { createOrder(idempotencyKey: $key) { id } }', { key: 'k' }, true],
    ['mutation M($k: String) { a: pay(idempotencyKey: $k) b: pay(idempotencyKey: "b") }', {}, true],
    ['mutation { createOrder(input: { idempotencyKey: null }, idempotencyKey: 7) { id } }', {}, true],
  ])('%j with variables %j → %s: a null or unset value is no key', (document, variables, expected) => {
    expect(passesArgument(document, 'idempotencyKey', variables)).toBe(expected);
  });
});
