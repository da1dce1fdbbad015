import { Decimal } from '@prisma/client/runtime/client';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson, fingerprint, IdempotencyInputError } from '../../src/index.js';

/** Rebuilds an object with its keys in reverse order, recursively. */
function reversed(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reversed);
  if (value && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).reverse()) {
      Object.defineProperty(out, key, {
        value: reversed((value as Record<string, unknown>)[key]),
        enumerable: true,
      });
    }
    return out;
  }
  return value;
}

describe('fingerprint', () => {
  it('is a sha256 hex digest', () => {
    expect(fingerprint('op', { a: 1 })).toMatch(/^[0-9a-f]{64}$/);
  });

  it('does not depend on object key order (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(fingerprint('op', reversed(value))).toBe(fingerprint('op', value));
      }),
    );
  });

  it('gives distinct values distinct fingerprints (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.jsonValue(), (a, b) => {
        fc.pre(canonicalJson('op', a) !== canonicalJson('op', b));
        expect(fingerprint('op', a)).not.toBe(fingerprint('op', b));
      }),
    );
  });

  it('depends on the operation', () => {
    expect(fingerprint('a', {})).not.toBe(fingerprint('b', {}));
  });

  it.each([
    ['1 and "1"', { v: 1 }, { v: '1' }],
    ['a Date and its ISO string', { v: new Date(0) }, { v: new Date(0).toISOString() }],
    ['null and a missing member', { v: null }, {}],
    ['a BigInt and a number', { v: 1n }, { v: 1 }],
    ['a BigInt and its string', { v: 1n }, { v: '1' }],
    ['a Decimal and its string', { v: new Decimal('1.5') }, { v: '1.5' }],
    ['a Set and an array', { v: new Set([1]) }, { v: [1] }],
    ['a Map and an object', { v: new Map([['a', 1]]) }, { v: { a: 1 } }],
    ['bytes and their base64', { v: new Uint8Array([1, 2]) }, { v: 'AQI=' }],
    ['a forged tag and a Date', { v: { $date: new Date(0).toISOString() } }, { v: new Date(0) }],
    ['undefined in an array and null', [undefined], [null]],
    ['true and 1', { v: true }, { v: 1 }],
    ['a NaN Decimal and its text', { v: new Decimal(Number.NaN) }, { v: 'NaN' }],
    ['an infinite Decimal and its text', { v: new Decimal('-Infinity') }, { v: '-Infinity' }],
    ['NaN and infinite Decimals', new Decimal(Number.NaN), new Decimal('Infinity')],
    ['-0 and 0', { v: -0 }, { v: 0 }],
    ['-0 and 0 in an array', [-0], [0]],
    ['-0 and 0 as Map values', new Map([['a', -0]]), new Map([['a', 0]])],
    ['NaN and Infinity', { v: Number.NaN }, { v: Number.POSITIVE_INFINITY }],
    ['Infinity and -Infinity', { v: Number.POSITIVE_INFINITY }, { v: Number.NEGATIVE_INFINITY }],
    ['two URLs', new URL('https://shop.example/a'), new URL('https://shop.example/b')],
    ['an invalid Date and a valid one', new Date(Number.NaN), new Date(0)],
  ])('tells apart %s', (_name, a, b) => {
    expect(fingerprint('op', a)).not.toBe(fingerprint('op', b));
  });

  it.each([
    ['undefined members and missing ones', { a: 1, b: undefined }, { a: 1 }],
    ['Sets in any order', new Set([3, 1, 2]), new Set([2, 3, 1])],
    [
      'Maps in any order',
      new Map<unknown, number>([
        ['a', 1],
        [2, 2],
      ]),
      new Map<unknown, number>([
        [2, 2],
        ['a', 1],
      ]),
    ],
    ['equal Decimals written differently', new Decimal('1.50'), new Decimal('1.5')],
    ['a Decimal -0 and 0, which Decimal compares by value', new Decimal('-0'), new Decimal('0')],
    ['a Buffer and the same Uint8Array', Buffer.from([1, 2]), new Uint8Array([1, 2])],
    ['invalid Dates', new Date(Number.NaN), new Date('not a date')],
    [
      'an enumerable getter and its value',
      {
        get v() {
          return 1;
        },
      },
      { v: 1 },
    ],
    // biome-ignore lint/suspicious/noSparseArray: a hole, as JSON and superjson see it
    ['a hole and undefined in an array', [, 1], [undefined, 1]],
    [
      'a plain object with and without symbol-keyed or non-enumerable members, which JSON ignores too',
      Object.defineProperty({ a: 1, [Symbol.for('x')]: 2 }, 'hidden', { value: 3 }),
      { a: 1 },
    ],
  ])('equates %s', (_name, a, b) => {
    expect(fingerprint('op', a)).toBe(fingerprint('op', b));
  });

  it('is safe with __proto__ and constructor keys', () => {
    const input = JSON.parse('{"__proto__": {"polluted": true}, "constructor": {"prototype": 1}}');
    const a = fingerprint('op', input);
    expect(a).not.toBe(fingerprint('op', {}));
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(canonicalJson('op', input)).toContain('"__proto__"');
  });

  it('rejects a deeply nested input with a clear error instead of overflowing the stack', () => {
    let deep: unknown = 'leaf';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(() => fingerprint('op', deep)).toThrow(IdempotencyInputError);
    expect(() => fingerprint('op', deep)).toThrow(/deeper than 64/);
  });

  it('rejects circular inputs, functions and lone surrogates', () => {
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(() => fingerprint('op', circular)).toThrow(/circular/);
    expect(() => fingerprint('op', { f: () => 1 })).toThrow(IdempotencyInputError);
    expect(() => fingerprint('op', { s: '\ud800' })).toThrow(IdempotencyInputError);
  });

  it('finds a cycle at the deepest maxDepth accepted, and refuses a maxDepth the stack could not reach', () => {
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(() => fingerprint('op', circular, { maxDepth: 1_000 })).toThrow(IdempotencyInputError);
    for (const maxDepth of [0, 1.5, 1_001, Number.POSITIVE_INFINITY, Number.NaN]) {
      expect(() => fingerprint('op', {}, { maxDepth }), String(maxDepth)).toThrow(
        'fingerprintOptions.maxDepth must be an integer from 1 to 1000',
      );
    }
  });

  it('refuses an input longer than maxLength as canonical JSON, an object found in several places counted at each', () => {
    // A few kilobytes naming one array 2^40 times: before the limit, the text took the process's memory.
    let doubled: unknown = 'leaf';
    for (let i = 0; i < 40; i++) doubled = [doubled, doubled];
    expect(() => fingerprint('op', doubled)).toThrow(/longer than 1048576 characters/);
    const list = Array.from({ length: 1_000 }, (_, i) => i);
    expect(() => fingerprint('op', { batches: Array(3_000).fill(list) })).toThrow(IdempotencyInputError);
    expect(() => fingerprint('op', ['x'.repeat(100_000)], { maxLength: 100_000 })).toThrow(/maxLength/);
    // Work that writes little counts too: the keys of undefined members, empty Maps and Sets.
    const hollow = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`k${i}`, undefined]));
    expect(() => fingerprint('op', Array(4_000).fill(hollow))).toThrow(/maxLength/);
    expect(() => canonicalJson('op', Array(9_990).fill(new Map()), { maxLength: 10_000 })).toThrow(
      /maxLength/,
    );
    expect(() => canonicalJson('op', Array(9_990).fill(new Set()), { maxLength: 10_000 })).toThrow(
      /maxLength/,
    );
    const form = new FormData();
    form.append('x'.repeat(100_000), 'v');
    expect(() => fingerprint('op', Array(40).fill(form))).toThrow(/maxLength/);
    // Within it, the text is what it always was.
    const input = { batches: Array(100).fill(list) };
    expect(fingerprint('op', input, { maxLength: 100_000_000 })).toBe(fingerprint('op', input));
    for (const maxLength of [0, 1.5, 100_000_001, Number.NaN]) {
      expect(() => fingerprint('op', {}, { maxLength }), String(maxLength)).toThrow(
        'fingerprintOptions.maxLength must be an integer from 1 to 100000000',
      );
    }
  });

  it('accepts the same object twice when it is not circular', () => {
    const shared = { a: 1 };
    expect(() => fingerprint('op', { x: shared, y: shared })).not.toThrow();
  });
});

/**
 * What `canonicalJson` must write for plain data (with `undefined` and `-0`), written independently
 * of it: members filtered, sorted by a comparator and joined, every leaf written by JSON itself.
 */
function referenceText(value: unknown): string {
  if (value === undefined) return '{"$undefined":true}';
  if (Object.is(value, -0)) return '{"$number":"-0"}';
  if (Array.isArray(value)) return `[${value.map(referenceText).join(',')}]`;
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  const members = Object.entries(value)
    .filter(([, member]) => member !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(
      ([key, member]) => `${JSON.stringify(key.startsWith('$') ? `$${key}` : key)}:${referenceText(member)}`,
    );
  return `{${members.join(',')}}`;
}

/** Rows that share their keys, listed in either order, some members `undefined` or `-0`. */
const rows = fc
  .uniqueArray(fc.string({ unit: fc.constantFrom('a', 'b', 'Z', '$', '1', 'é', '😀', '"'), maxLength: 3 }), {
    maxLength: 8,
  })
  .chain((keys) => {
    const member = fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constant(undefined), fc.constant(-0));
    const row = fc.tuple(fc.array(member, { minLength: keys.length, maxLength: keys.length }), fc.boolean());
    return fc.array(row, { maxLength: 6 }).map((list) =>
      list.map(([values, reverse]) => {
        const entries = keys.map((key, i): [string, unknown] => [key, values[i]]);
        return Object.fromEntries(reverse ? entries.reverse() : entries);
      }),
    );
  });

/** A class whose instances hash as their own fields. */
class Point {
  constructor(
    public x: number,
    public y: number,
  ) {}
}

describe('canonicalJson', () => {
  // Records keep the fingerprints of earlier versions: a retry that spans an upgrade must still
  // match. These texts were written by the first implementation (a tagged tree, then canonicalize).
  it.each<[string, unknown, string]>([
    [
      'plain data, keys out of order',
      { b: [1, 'two', null, true], a: { d: 2.5, c: -3 } },
      '{"input":{"a":{"c":-3,"d":2.5},"b":[1,"two",null,true]},"operation":"op"}',
    ],
    [
      'keys compared by UTF-16 code units',
      { é: 1, z: 2, Z: 3, '😀': 4, '': 5, '10': 6, '9': 7 },
      '{"input":{"":5,"10":6,"9":7,"Z":3,"z":2,"\u00e9":1,"\ud83d\ude00":4},"operation":"op"}',
    ],
    [
      'strings that need escapes',
      { s: 'quote " backslash \\ newline \n tab \t nul \u0000 pair 😀' },
      '{"input":{"s":"quote \\" backslash \\\\ newline \\n tab \\t nul \\u0000 pair \ud83d\ude00"},"operation":"op"}',
    ],
    [
      'numbers',
      [0, -0, 1e21, 1e-7, 0.1, Number.MAX_SAFE_INTEGER, NaN, Infinity, -Infinity],
      '{"input":[0,{"$number":"-0"},1e+21,1e-7,0.1,9007199254740991,{"$number":"NaN"},{"$number":"Infinity"},{"$number":"-Infinity"}],"operation":"op"}',
    ],
    [
      'members starting with $',
      { $date: 'x', $$y: 1, a$: 2 },
      '{"input":{"$$$y":1,"$$date":"x","a$":2},"operation":"op"}',
    ],
    [
      'undefined members, holes and undefined in arrays',
      { a: undefined, b: Object.assign(new Array(3), { 0: undefined, 2: 1 }) },
      '{"input":{"b":[{"$undefined":true},{"$undefined":true},1]},"operation":"op"}',
    ],
    [
      'bigint, Date, invalid Date',
      [10n ** 30n, new Date(0), new Date(Number.NaN)],
      '{"input":[{"$bigint":"1000000000000000000000000000000"},{"$date":"1970-01-01T00:00:00.000Z"},{"$date":"invalid"}],"operation":"op"}',
    ],
    [
      'bytes, typed arrays, ArrayBuffer, DataView',
      [
        Buffer.from('hi'),
        new Uint8Array([1, 2]),
        new Float64Array([1.5]),
        new ArrayBuffer(2),
        new DataView(new ArrayBuffer(1)),
      ],
      '{"input":[{"$bytes":"aGk="},{"$bytes":"AQI="},{"$view":["Float64Array","AAAAAAAA+D8="]},{"$arrayBuffer":"AAA="},{"$view":["DataView","AA=="]}],"operation":"op"}',
    ],
    [
      'Decimal, RegExp',
      [new Decimal('1.50'), /a+b/gi],
      '{"input":[{"$decimal":"1.5"},{"$regexp":"/a+b/gi"}],"operation":"op"}',
    ],
    [
      'Map and Set ordered by canonical text',
      [
        new Map<unknown, unknown>([
          ['b', 1],
          [1, 'x'],
          [12, 'y'],
        ]),
        new Set([12, 1, 'a', [2]]),
      ],
      '{"input":[{"$map":[["b",1],[1,"x"],[12,"y"]]},{"$set":["a",12,1,[2]]}],"operation":"op"}',
    ],
    [
      'class instance and toJSON',
      [new Point(1, 2), { toJSON: () => ({ z: 1 }) }],
      '{"input":[{"x":1,"y":2},{"z":1}],"operation":"op"}',
    ],
    [
      'an own __proto__ member',
      JSON.parse('{"__proto__": 1, "constructor": 2}'),
      '{"input":{"__proto__":1,"constructor":2},"operation":"op"}',
    ],
  ])('writes %s as it always did', (_name, input, text) => {
    expect(canonicalJson('op', input)).toBe(text);
  });

  it('writes plain data as an independent canonicalizer does (property)', () => {
    // Objects with few keys from few letters: some of them share a first key but not the others.
    const similar = fc.array(
      fc.dictionary(fc.constantFrom('a', 'b', 'c', '$a'), fc.oneof(fc.integer(), fc.constant(undefined)), {
        maxKeys: 4,
      }),
      { maxLength: 8 },
    );
    const data = fc.oneof(
      fc.jsonValue({ stringUnit: 'grapheme' }),
      rows,
      fc.array(rows, { maxLength: 3 }),
      similar,
    );
    fc.assert(
      fc.property(data, (value) => {
        expect(canonicalJson('op', value)).toBe(`{"input":${referenceText(value)},"operation":"op"}`);
      }),
    );
  });

  it('writes short and long strings as JSON does, one character of each code below 128 or a pair', () => {
    const characters = [...Array.from({ length: 128 }, (_, code) => String.fromCharCode(code)), '😀', 'é'];
    for (const character of characters) {
      for (const text of [character, `ab${character}`, `${'x'.repeat(20)}${character}`]) {
        expect(canonicalJson('op', text)).toBe(`{"input":${JSON.stringify(text)},"operation":"op"}`);
      }
    }
  });

  it('reads members one by one in canonical order, between writes, as earlier versions did', () => {
    // Texts and errors of the writer before 0.2 for getters with side effects.
    const removesEarlier = {
      b: 1,
      get a() {
        delete (this as { b?: number }).b;
        return 1;
      },
    };
    expect(canonicalJson('op', removesEarlier)).toBe('{"input":{"a":1},"operation":"op"}');
    const changesSibling = {
      b: 1,
      get a() {
        (this as { b: number }).b = 2;
        return 1;
      },
    };
    expect(canonicalJson('op', changesSibling)).toBe('{"input":{"a":1,"b":2},"operation":"op"}');
    let reads = 0;
    const counted = {
      get a() {
        return ++reads;
      },
      b: 1,
    };
    expect(canonicalJson('op', counted)).toBe('{"input":{"a":1,"b":1},"operation":"op"}');
    const throwsLater = {
      a: () => 1,
      get z(): number {
        throw new TypeError('not read');
      },
    };
    expect(() => canonicalJson('op', throwsLater)).toThrow(IdempotencyInputError);
  });

  it('writes a set of keys met in an earlier call, or in a call made meanwhile, as it did the first time', () => {
    const wide = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${99 - i}`, i]));
    const wideText = referenceText(wide);
    const long = { [`b${'x'.repeat(3_000)}`]: 1, [`a${'y'.repeat(3_000)}`]: 2 };
    const longText = referenceText(long);
    // A getter that fingerprints other inputs of the same depths while the outer one is written.
    const nested = {
      b: { y: 1, x: 2 },
      get a() {
        canonicalJson('other', { b: { z: 1 }, c: 1 });
        canonicalJson('other', [{ y: 3, x: 4 }, { q: 1 }, { r: 1 }, { s: 1 }, { t: 1 }]);
        return { x: 3, y: 4 };
      },
    };
    for (let call = 0; call < 3; call++) {
      expect(canonicalJson('op', { b: 1, a: 2 })).toBe('{"input":{"a":2,"b":1},"operation":"op"}');
      expect(canonicalJson('op', { b: undefined, a: 2 })).toBe('{"input":{"a":2},"operation":"op"}');
      expect(canonicalJson('op', { b: 1, a: undefined })).toBe('{"input":{"b":1},"operation":"op"}');
      expect(canonicalJson('op', wide)).toBe(`{"input":${wideText},"operation":"op"}`);
      expect(canonicalJson('op', [long, long])).toBe(`{"input":[${longText},${longText}],"operation":"op"}`);
      expect(canonicalJson('op', nested)).toBe(
        '{"input":{"a":{"x":3,"y":4},"b":{"x":2,"y":1}},"operation":"op"}',
      );
      expect(() => canonicalJson('op', { '\udc00': 1, a: 1 })).toThrow(IdempotencyInputError);
      expect(canonicalJson('op', { '\udc00': undefined, a: 1 })).toBe('{"input":{"a":1},"operation":"op"}');
    }
  });

  it('refuses a lone surrogate, in a value or in a member name', () => {
    expect(() => canonicalJson('op', { a: '\ud800' })).toThrow(IdempotencyInputError);
    expect(() => canonicalJson('op', { '\udc00': 1 })).toThrow(IdempotencyInputError);
    expect(canonicalJson('op', { a: '\ud83d\ude00' })).toBe('{"input":{"a":"😀"},"operation":"op"}');
  });
});
