import fc from 'fast-check';
import { getOperationAST, Kind, parse, type SelectionNode, type ValueNode } from 'graphql';
import { describe, expect, it } from 'vitest';
import { operationTypeOf, passesArgument, rootKeyCoverage } from '../../src/client/graphql-document.js';

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

/** What the server's field-level keys see, read with graphql-js: the reference for `rootKeyCoverage`. */
function referenceCoverage(document: string, variables: Record<string, unknown>) {
  const parsed = parse(document);
  const operation = getOperationAST(parsed)!;
  const fragments = new Map(
    parsed.definitions.flatMap((d) => (d.kind === Kind.FRAGMENT_DEFINITION ? [[d.name.value, d]] : [])),
  );
  const defaults = new Map(
    (operation.variableDefinitions ?? []).map((v) => [v.variable.name.value, v.defaultValue]),
  );
  const passed = (value: ValueNode | undefined): boolean => {
    if (!value || value.kind === Kind.NULL) return false;
    if (value.kind !== Kind.VARIABLE) return true;
    const name = value.name.value;
    return Object.hasOwn(variables, name) ? variables[name] != null : passed(defaults.get(name));
  };
  const coverage = { fields: 0, keyed: 0 };
  const spread = new Set<string>();
  const count = (selections: readonly SelectionNode[]) => {
    for (const selection of selections) {
      if (selection.kind === Kind.FIELD) {
        if (selection.name.value.startsWith('__')) continue;
        coverage.fields++;
        if (passed(selection.arguments?.find((a) => a.name.value === 'idempotencyKey')?.value))
          coverage.keyed++;
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        count(selection.selectionSet.selections);
      } else if (!spread.has(selection.name.value)) {
        spread.add(selection.name.value);
        count(fragments.get(selection.name.value)!.selectionSet.selections);
      }
    }
  };
  count(operation.selectionSet.selections);
  return coverage;
}

describe('rootKeyCoverage', () => {
  it.each([
    ['mutation { pay(amount: 1, idempotencyKey: "k") notify(to: "bob") }', {}, { fields: 2, keyed: 1 }],
    ['mutation { a: pay(idempotencyKey: "a") b: pay(idempotencyKey: "b") }', {}, { fields: 2, keyed: 2 }],
    ['mutation { pay(input: { idempotencyKey: "k" }) }', {}, { fields: 1, keyed: 0 }],
    ['mutation { v1 { pay(idempotencyKey: "k") } }', {}, { fields: 1, keyed: 0 }],
    [
      'mutation { ...Pay notify } fragment Pay on Mutation { pay(idempotencyKey: "k") }',
      {},
      { fields: 2, keyed: 1 },
    ],
    ['mutation { ... on Mutation { pay(idempotencyKey: "k") } __typename }', {}, { fields: 1, keyed: 1 }],
    ['mutation M($k: String = "d") { pay(idempotencyKey: $k) }', {}, { fields: 1, keyed: 1 }],
    ['mutation M($k: String = "d") { pay(idempotencyKey: $k) }', { k: null }, { fields: 1, keyed: 0 }],
    ['mutation M($k: String = null) { pay(idempotencyKey: $k) }', {}, { fields: 1, keyed: 0 }],
    ['mutation { pay(amount: -1.5e3, idempotencyKey: "k") @skip(if: false) }', {}, { fields: 1, keyed: 1 }],
  ])('%j with variables %j → %j', (document, variables, expected) => {
    expect(rootKeyCoverage(document, undefined, 'idempotencyKey', variables)).toEqual(expected);
    expect(referenceCoverage(document, variables)).toEqual(expected);
  });

  it('reads the operation operationName names', () => {
    const document = 'mutation A { pay(idempotencyKey: "k") } mutation B { pay notify }';
    expect(rootKeyCoverage(document, 'A', 'idempotencyKey')).toEqual({ fields: 1, keyed: 1 });
    expect(rootKeyCoverage(document, 'B', 'idempotencyKey')).toEqual({ fields: 2, keyed: 0 });
  });

  it.each([
    ['an unbalanced document', 'mutation { pay(idempotencyKey: "k") ', undefined],
    ['a missing fragment', 'mutation { ...Pay }', undefined],
    ['an operationName the document lacks', 'mutation M { pay }', 'Other'],
    ['several operations and no operationName', 'mutation A { a } mutation B { b }', undefined],
    ['a type definition', 'type Mutation { pay: Int }', undefined],
  ])('cannot tell with %s', (_, document, operationName) => {
    expect(rootKeyCoverage(document, operationName, 'idempotencyKey')).toBeUndefined();
  });

  it('agrees with graphql-js on generated mutations with fragments, variables and nested keys', () => {
    const keyValue = fc.constantFrom('"k"', 'null', '$set', '$unset', '$defaulted', '$nulled', '7');
    const other = fc.constantFrom(
      '',
      'amount: -1.5e3, ',
      'note: "idempotencyKey: x", ',
      'in: { idempotencyKey: "x" }, ',
    );
    const field = fc
      .tuple(fc.constantFrom('pay', 'notify', 'a: pay'), other, fc.option(keyValue), fc.boolean())
      .map(([name, args, key, nested]) => {
        const list = `${args}${key === null ? '' : `idempotencyKey: ${key}`}`;
        return `${name}${list ? `(${list})` : ''}${nested ? ' { v1 { pay(idempotencyKey: "n") } }' : ''}`;
      });
    const selection = fc.oneof(
      field,
      field.map((f) => `... on Mutation { ${f} }`),
      fc.constant('...F'),
      fc.constant('__typename'),
    );
    fc.assert(
      fc.property(
        fc.array(selection, { minLength: 1, maxLength: 4 }),
        field,
        fc.constantFrom({}, { set: 'k' }, { set: 'k', nulled: null }, { defaulted: null }),
        (selections, fragmentField, variables) => {
          const document = [
            'mutation M($set: String, $unset: String, $defaulted: String = "d", $nulled: String = null) {',
            ...selections,
            '}',
            `fragment F on Mutation { ${fragmentField} }`,
          ].join('\n');
          expect(rootKeyCoverage(document, undefined, 'idempotencyKey', variables)).toEqual(
            referenceCoverage(document, variables),
          );
        },
      ),
      { numRuns: 300 },
    );
  });
});
