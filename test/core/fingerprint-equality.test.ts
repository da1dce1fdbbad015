import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/index.js';

// Two inputs share a fingerprint exactly when they mean the same: equal by Node's deep strict
// equality once what the fingerprint documents as meaningless is removed (object key order, the
// order of Map entries and Set members, undefined object members, an object's prototype).
const fp = (input: unknown) => fingerprint('op', input);
const runs = { numRuns: 200 };

class Money {}

/** Small domains, so that near-equal pairs (0 and -0, 1 and "1" and 1n, a Date and its text) are common. */
const leaf = fc.oneof(
  fc.constantFrom<unknown>(0, -0, 1, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY),
  fc.constantFrom<unknown>('0', '-0', '1', '', 'NaN', '1970-01-01T00:00:00.000Z', '$date', 'AQI='),
  fc.constantFrom<unknown>(true, false, null, undefined, 0n, 1n, -1n),
  fc.double(),
  fc.string({ maxLength: 4 }),
  fc.bigInt({ min: -3n, max: 3n }),
  fc.integer({ min: -1, max: 1 }).map((time) => new Date(time)),
  fc.uint8Array({ maxLength: 3 }),
);
const key = fc.oneof(
  fc.constantFrom(
    'a',
    'b',
    '',
    '$',
    '$date',
    '$$date',
    '$bigint',
    '$undefined',
    '__proto__',
    'constructor',
    'toJSON',
  ),
  fc.string({ maxLength: 3 }),
);
type Kind = 'plain' | 'null' | 'instance';

/** Own enumerable members set with defineProperty, so `__proto__` is a member and not the prototype. */
function objectOf(entries: [string, unknown][], kind: Kind): object {
  const prototype = { plain: Object.prototype, null: null, instance: Money.prototype }[kind];
  const object = Object.create(prototype);
  for (const [k, v] of entries) {
    Object.defineProperty(object, k, { value: v, enumerable: true, writable: true, configurable: true });
  }
  return object;
}

const { value } = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', maxDepth: 3 },
    leaf,
    fc.array(tie('value'), { maxLength: 3 }),
    fc
      .tuple(
        fc.array(fc.tuple(key, tie('value')), { maxLength: 3 }),
        fc.constantFrom<Kind>('plain', 'null', 'instance'),
      )
      // A class instance needs a field of its own, or it is refused.
      .map(([entries, kind]) =>
        objectOf(entries, entries.length === 0 && kind === 'instance' ? 'plain' : kind),
      ),
    fc.array(fc.tuple(tie('value'), tie('value')), { maxLength: 3 }).map((entries) => new Map(entries)),
    fc.array(tie('value'), { maxLength: 3 }).map((members) => new Set(members)),
  ),
}));

/** What the fingerprint compares: plain objects without undefined members, and no other change. */
function meaning(input: unknown): unknown {
  if (Array.isArray(input)) return input.map(meaning);
  if (input instanceof Map) return new Map([...input].map(([k, v]) => [meaning(k), meaning(v)]));
  if (input instanceof Set) return new Set([...input].map(meaning));
  if (input === null || typeof input !== 'object' || input instanceof Date || input instanceof Uint8Array) {
    return input;
  }
  const entries = Object.entries(input).filter(([, v]) => v !== undefined);
  return objectOf(
    entries.map(([k, v]) => [k, meaning(v)]),
    'plain',
  );
}

/** The same value with every object's keys, Map's entries and Set's members in reverse order. */
function reordered(input: unknown): unknown {
  if (Array.isArray(input)) return input.map(reordered);
  if (input instanceof Map)
    return new Map([...input].reverse().map(([k, v]) => [reordered(k), reordered(v)]));
  if (input instanceof Set) return new Set([...input].reverse().map(reordered));
  if (input === null || typeof input !== 'object' || input instanceof Date || input instanceof Uint8Array) {
    return input;
  }
  const kind: Kind =
    Object.getPrototypeOf(input) === null ? 'null' : input instanceof Money ? 'instance' : 'plain';
  const entries = Object.entries(input).reverse();
  return objectOf(
    entries.map(([k, v]) => [k, reordered(v)]),
    kind,
  );
}

/**
 * Leaves that a careless encoding would confuse with `leaf`: another type with the same text, and a
 * plain object that spells the leaf's own type tag.
 */
function lookalikes(leaf: unknown): unknown[] {
  if (leaf instanceof Date) return [leaf.toISOString(), { $date: leaf.toISOString() }, leaf.getTime()];
  if (leaf instanceof Uint8Array) {
    const base64 = Buffer.from(leaf).toString('base64');
    return [base64, { $bytes: base64 }, [...leaf], new Set(leaf)];
  }
  switch (typeof leaf) {
    case 'number':
      if (Object.is(leaf, 0)) return [-0, '0', false];
      if (Object.is(leaf, -0)) return [0, '-0', { $number: '-0' }];
      return [
        String(leaf),
        BigInt.asIntN(64, BigInt(Number.isInteger(leaf) ? leaf : 0)),
        { $number: String(leaf) },
      ];
    case 'string':
      return [
        `$${leaf}`,
        leaf === '' ? null : leaf.slice(1),
        /^-?\d+$/.test(leaf) ? BigInt(leaf) : Number(leaf),
      ];
    case 'bigint':
      return [Number(leaf), String(leaf), { $bigint: String(leaf) }];
    case 'boolean':
      return [Number(leaf), String(leaf)];
    case 'undefined':
      return [null, { $undefined: true }];
  }
  return [undefined, 0, '', {}]; // null
}

/** Every copy of `input` that differs from it in one leaf, replaced by one of its lookalikes. */
function twins(input: unknown): unknown[] {
  const leaves: unknown[] = [];
  const walk = (x: unknown, visit: (leaf: unknown) => unknown): unknown => {
    if (Array.isArray(x)) return x.map((v) => walk(v, visit));
    if (x instanceof Map) return new Map([...x].map(([k, v]) => [walk(k, visit), walk(v, visit)]));
    if (x instanceof Set) return new Set([...x].map((v) => walk(v, visit)));
    if (x === null || typeof x !== 'object' || x instanceof Date || x instanceof Uint8Array) return visit(x);
    const kind: Kind = Object.getPrototypeOf(x) === null ? 'null' : x instanceof Money ? 'instance' : 'plain';
    return objectOf(
      Object.entries(x).map(([k, v]) => [k, walk(v, visit)]),
      kind,
    );
  };
  walk(input, (leaf) => leaves.push(leaf));
  return leaves.flatMap((leaf, position) =>
    lookalikes(leaf).map((replacement) => {
      let index = 0;
      return walk(input, (x) => (index++ === position ? replacement : x));
    }),
  );
}

describe('fingerprint equality (properties)', () => {
  it('is the same for two inputs exactly when they mean the same', () => {
    fc.assert(
      fc.property(value, value, (a, b) => {
        expect(fp(a) === fp(b)).toBe(isDeepStrictEqual(meaning(a), meaning(b)));
      }),
      runs,
    );
  });

  it('tells an input from every copy of it with one leaf replaced by a lookalike', () => {
    fc.assert(
      fc.property(value, (a) => {
        for (const b of twins(a)) {
          expect(fp(a) === fp(b)).toBe(isDeepStrictEqual(meaning(a), meaning(b)));
        }
      }),
      runs,
    );
  });

  it('never changes with the order of object keys, Map entries or Set members', () => {
    fc.assert(
      fc.property(value, (input) => {
        expect(fp(reordered(input))).toBe(fp(input));
      }),
      runs,
    );
  });

  it('survives structuredClone, which keeps every value it copies', () => {
    fc.assert(
      fc.property(value, (input) => {
        expect(fp(structuredClone(input))).toBe(fp(input));
      }),
      runs,
    );
  });
});
