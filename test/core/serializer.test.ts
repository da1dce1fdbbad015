import { Decimal } from '@prisma/client/runtime/client';
import fc from 'fast-check';
import { SuperJSON } from 'superjson';
import { describe, expect, it } from 'vitest';
import { type DecimalLike, isDecimal } from '../../src/core/fingerprint.js';
import { superjsonSerializer } from '../../src/index.js';

describe('superjsonSerializer', () => {
  const serializer = superjsonSerializer({ Decimal });
  const roundTrip = (value: unknown) => serializer.deserialize(serializer.serialize(value));
  /**
   * The property the shortcuts keep: the serializer writes what `reference` writes (or throws where
   * it throws), and a value it does not read back before storing comes back equal.
   */
  const writesAs = (reference: SuperJSON) => (value: unknown) => {
    let expected: string;
    try {
      expected = reference.stringify(value as Parameters<SuperJSON['stringify']>[0]);
    } catch {
      expect(() => serializer.serialize(value)).toThrow();
      return;
    }
    expect(serializer.serialize(value)).toBe(expected);
    const known = serializer.serializeKnown!(value);
    if (known === undefined) return;
    expect(known).toBe(expected);
    expect(roundTrip(value)).toEqual(value);
  };

  it('round-trips any JSON value (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        // superjson refuses these keys (prototype pollution guard); see the test below.
        fc.pre(!/"(__proto__|prototype|constructor)":/.test(JSON.stringify(value)));
        expect(roundTrip(value)).toEqual(value);
      }),
    );
  });

  it('writes plain data as superjson does, whichever path it takes (property)', () => {
    // Stored texts must not change with the shortcut for plain JSON: a record written before an
    // upgrade is replayed after it, and the other way round.
    const reference = new SuperJSON();
    const shared = { id: 1 };
    const values = fc.oneof(
      fc.jsonValue(),
      fc.anything({ withNullPrototype: true, withObjectString: true }),
      fc.constantFrom(-0, [undefined], [shared, shared], { a: -0 }, { a: undefined }),
    );
    fc.assert(fc.property(values, writesAs(reference)));
  });

  it('writes rows of Dates and Decimals as superjson does, and reads them back equal (property)', () => {
    // The shortcut writes these itself too: the text must be superjson's, byte for byte, with the
    // paths of \`meta.values\` in its order (integer-like keys first within each container).
    // Registered as src/core/serializer.ts registers them: a Decimal told by its fields and methods.
    const reference = new SuperJSON();
    reference.registerCustom<DecimalLike, string>(
      {
        isApplicable: (value): value is DecimalLike =>
          typeof value === 'object' && value !== null && isDecimal(value),
        // Its text, and `-0` for a negative zero, which decimal.js's `toString` writes `0`.
        serialize: (value) => (value.toString() === '0' && value.s < 0 ? '-0' : value.toString()),
        deserialize: (text) => new Decimal(text) as DecimalLike,
      },
      'Decimal',
    );
    reference.registerCustom<Buffer, string>(
      {
        isApplicable: (value): value is Buffer => Buffer.isBuffer(value),
        serialize: (value) => value.toString('base64'),
        deserialize: (text) => Buffer.from(text, 'base64'),
      },
      'Buffer',
    );
    const decimals = fc.oneof(
      fc.double().map((n) => new Decimal(n)),
      fc
        .constantFrom('-0', '0', '-1.50', '1e-30', '1e+40', '123456789012345678901234567890.5')
        .map((text) => new Decimal(text)),
    );
    const keys = fc.oneof(fc.string(), fc.constantFrom('a.b', 'a\\b', 'a\\.b', '.', '', '0', '1', '10', '2'));
    const { tree } = fc.letrec((tie) => ({
      tree: fc.oneof({ depthSize: 'small' }, tie('leaf'), tie('array'), tie('object')),
      leaf: fc.oneof(
        fc.oneof(fc.string(), fc.integer(), fc.double(), fc.boolean(), fc.constant(null)),
        fc.date(),
        decimals,
        fc.constant(undefined),
      ),
      array: fc.array(tie('tree'), { maxLength: 4 }),
      object: fc.dictionary(keys, tie('tree'), { maxKeys: 4 }),
    }));
    const date = new Date(0);
    const mixed = {
      k: [{ x: date }, new Date(1), { 1: new Decimal('1'), b: new Date(2), a: { z: new Date(3) } }],
    };
    // What superjson writes otherwise than JSON, or what would not come back: left to superjson.
    class Money extends Decimal {
      override toString() {
        return `$${super.toString()}`;
      }
      override toJSON() {
        return this.toString();
      }
    }
    const odd = [
      { price: new Money('1.5') },
      { rows: Object.assign([1], { at: new Date(0) }) },
      { match: 'abc'.match(/b/) },
      { at: Object.assign(new Date(0), { valueOf: () => Number.NaN }) },
      { at: Object.assign(new Date(0), { toISOString: () => 'nope' }) },
      { at: Object.assign(new Date(0), { d: [1], e: 0, s: 1, toFixed: () => '1' }) },
      { like: Object.defineProperty({ d: [1], e: 0, s: 1 }, 'toFixed', { value: () => '1' }) },
    ];
    fc.assert(
      fc.property(
        fc.oneof(tree, fc.constant(mixed), fc.constant({ twice: [date, date] }), fc.constantFrom(...odd)),
        writesAs(reference),
      ),
      { numRuns: 500 },
    );
    for (const value of odd) {
      expect(serializer.serialize(value)).toBe(reference.stringify(value as never));
      expect(serializer.serializeKnown!(value)).toBeUndefined();
    }
    expect(serializer.serializeKnown!(mixed)).toBe(reference.stringify(mixed as never));
    expect(serializer.serializeKnown!({ at: new Date(Number.NaN) })).toBeUndefined();
    expect(serializer.serializeKnown!({ amount: new Decimal('-0') })).toBe(
      '{"json":{"amount":"-0"},"meta":{"values":{"amount":[["custom","Decimal"]]},"v":1}}',
    );
  });

  it('skips the read-back only for what it knows comes back equal', () => {
    const known = (value: unknown) => serializer.serializeKnown!(value) !== undefined;
    expect(known({ a: [1, 'x', null, true, { b: 2.5 }] })).toBe(true);
    expect(known(Object.assign(Object.create(null), { a: 1 }))).toBe(true);
    expect(known({ at: new Date(0), amount: new Decimal('9.99') })).toBe(true);
    for (const value of [-0, { a: -0 }, [undefined], { a: undefined }, new Date(0), 1n, { a: new Map() }]) {
      expect(known(value)).toBe(false);
    }
    const shared = { id: 1 };
    expect(known([shared, shared])).toBe(false);
    expect(known(JSON.parse('{"__proto__": 1}'))).toBe(false);
  });

  it('round-trips Dates, BigInts, Maps, Sets and undefined (property)', () => {
    fc.assert(
      fc.property(
        fc.record({
          date: fc.date({ noInvalidDate: true }),
          big: fc.bigInt(),
          map: fc.array(fc.tuple(fc.string(), fc.integer())).map((entries) => new Map(entries)),
          set: fc.array(fc.integer()).map((values) => new Set(values)),
          missing: fc.constant(undefined),
        }),
        (value) => {
          const back = roundTrip(value) as typeof value;
          expect(back).toEqual(value);
          expect(back.date).toBeInstanceOf(Date);
          expect(typeof back.big).toBe('bigint');
          expect('missing' in back).toBe(true);
        },
      ),
    );
  });

  it('brings a Decimal back as a Decimal of the same value', () => {
    const back = roundTrip({ amount: new Decimal('12.345678901234567890') }) as { amount: Decimal };
    expect(back.amount).toBeInstanceOf(Decimal);
    expect(back.amount.toString()).toBe('12.34567890123456789');
  });

  it('brings a Decimal -0 back negative, in the text JSON answers it with', () => {
    for (const zero of [
      new Decimal('-0'),
      new Decimal(-5).mul(0),
      new Decimal('-0.001').toDecimalPlaces(2),
    ]) {
      for (const value of [{ refund: zero }, { refund: zero, seen: new Map() }]) {
        const back = roundTrip(value) as typeof value;
        expect(back.refund.isNeg()).toBe(true);
        expect(JSON.stringify(back.refund)).toBe('"-0"');
      }
    }
  });

  it('brings an array back with its holes, so every framework answers it as it answered the first call', () => {
    const slots = new Array(4);
    slots[0] = 'mon';
    slots[2] = new Date(0);
    const back = roundTrip({ slots }) as { slots: unknown[] };
    expect(back).toStrictEqual({ slots }); // holes and all (toStrictEqual tells them from undefined)
    expect(back.slots[2]).toBeInstanceOf(Date);
    expect(JSON.stringify(back)).toBe('{"slots":["mon",null,"1970-01-01T00:00:00.000Z",null]}');
    const wire = new SuperJSON();
    expect(wire.stringify(back)).toBe(wire.stringify({ slots }));
    for (const value of [new Map([['slots', slots]]), new Set([slots]), [slots, slots, 1n]]) {
      expect(roundTrip(value)).toStrictEqual(value);
    }
    const twice = roundTrip([slots, slots]) as unknown[];
    expect(twice[0]).toBe(twice[1]);
    // An object reached twice, through the holes' array and beside it, stays one object.
    const day = { day: 'mon', at: new Date(0) };
    const week = Object.assign(new Array(7), { 0: day, 2: day });
    const back2 = roundTrip({ week, first: day }) as { week: unknown[]; first: unknown };
    expect(back2).toStrictEqual({ week, first: day });
    expect(back2.week[0]).toBe(back2.week[2]);
    expect(back2.week[0]).toBe(back2.first);
  });

  it('brings float arrays back with their NaN, ±Infinity and -0', () => {
    const samples = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 1.5];
    for (const FloatArray of [Float32Array, Float64Array]) {
      const back = roundTrip({ samples: FloatArray.from(samples) }) as { samples: Float32Array };
      expect(back.samples).toBeInstanceOf(FloatArray);
      expect(Array.from(back.samples)).toStrictEqual(samples);
    }
    const view = new Float64Array(new Float64Array([1, -0, 3]).buffer, 8, 1);
    expect(Array.from((roundTrip([view]) as Float64Array[])[0]!)).toStrictEqual([-0]);
  });

  it('brings an Error back with its name, message, cause and own fields, as JSON and superjson answer it', () => {
    class CardError extends Error {
      override name = 'CardError';
    }
    const declined = Object.assign(new Error('card declined', { cause: { at: new Date(0) } }), {
      code: 'E_CARD',
      retryAt: new Date(1),
    });
    const settled = [
      { status: 'rejected', reason: declined },
      { status: 'rejected', reason: new CardError('expired') },
      { status: 'rejected', reason: Object.assign(new Error(), { message: 'own message' }) },
      { status: 'rejected', reason: new TypeError('not a card') },
    ];
    const back = roundTrip({ settled }) as { settled: { reason: Error & Record<string, unknown> }[] };
    expect(JSON.stringify(back)).toBe(JSON.stringify({ settled }));
    const wire = new SuperJSON();
    expect(wire.serialize(back)).toEqual(wire.serialize({ settled }));
    // An object reached twice through an Error's fields comes back equal in each place (superjson
    // restores shared references only through plain objects, arrays, Maps and Sets).
    const shared = { at: new Date(2) };
    const error = Object.assign(new Error('x'), { first: shared, second: shared });
    const both = roundTrip({ error, shared }) as { error: Error & Record<string, unknown>; shared: unknown };
    expect(both.error.first).toEqual(shared);
    expect(both.error.second).toEqual(shared);
    expect(both.shared).toEqual(shared);
    expect((roundTrip({ error }) as typeof both).error.second).toEqual(shared);
    const [first, second, , fourth] = back.settled.map((entry) => entry.reason);
    expect(first).toBeInstanceOf(Error);
    expect(first!.message).toBe('card declined');
    expect(first!.cause).toEqual({ at: new Date(0) });
    expect(first!.retryAt).toEqual(new Date(1));
    expect(second!.name).toBe('CardError');
    expect(fourth!.name).toBe('TypeError');
    expect(Object.keys(fourth!)).toEqual([]);
  });

  it('round-trips bytes', () => {
    expect(roundTrip(new Uint8Array([1, 2, 3]))).toEqual(new Uint8Array([1, 2, 3]));
  });

  it('round-trips Buffers and ArrayBuffers, bytes and type', () => {
    const value = { pdf: Buffer.from('%PDF-1.7'), raw: new Uint8Array([1, 2, 3]).buffer };
    const back = serializer.deserialize(serializer.serialize(value)) as typeof value;
    expect(Buffer.isBuffer(back.pdf)).toBe(true);
    expect(back.pdf.toString()).toBe('%PDF-1.7');
    expect(back.raw).toBeInstanceOf(ArrayBuffer);
    expect([...new Uint8Array(back.raw)]).toEqual([1, 2, 3]);
  });

  it('refuses results with __proto__, prototype or constructor keys instead of storing them', () => {
    expect(() => serializer.serialize(JSON.parse('{"__proto__": {}}'))).toThrow(/prototype pollution/);
    expect(() => serializer.serialize({ prototype: {} })).toThrow(/prototype pollution/);
  });

  it('refuses to store a Decimal it could not bring back', () => {
    expect(() => superjsonSerializer().serialize({ d: new Decimal('1') })).toThrow(/Decimal/);
  });

  it('brings back objects reached twice, and refuses those superjson would put back in the wrong place', () => {
    const a = { id: 'A' };
    const b = { id: 'B' };
    // Rebuilt by path: a path through a Set's member or a Map's key reordered it, and A was lost.
    expect(() => serializer.serialize({ x: a, s: new Set([a, b]), z: b })).toThrow(/reached twice/);
    expect(() =>
      serializer.serialize({
        x: a,
        m: new Map([
          [a, 1],
          [b, 2],
        ]),
        z: b,
      }),
    ).toThrow(/reached twice/);
    // A path back to the result below an object reached twice was replaced by its other copy.
    const user: Record<string, unknown> = { name: 'ann' };
    const post = { author: user };
    Object.assign(user, { posts: [post], featured: post });
    expect(() => serializer.serialize(user)).toThrow(/reached twice/);
    // What superjson does bring back stays storable.
    const shared = { id: 1, at: new Date(0) };
    const back = roundTrip({ a: shared, b: [shared], m: new Map([['k', a]]), c: a }) as Record<
      string,
      unknown
    >;
    expect(back).toEqual({ a: shared, b: [shared], m: new Map([['k', a]]), c: a });
    expect([(back.b as unknown[])[0], (back.m as Map<string, unknown>).get('k')]).toEqual([back.a, back.c]);
    const self: Record<string, unknown> = { name: 'x' };
    self.list = [self];
    const again = roundTrip(self) as { list: unknown[] };
    expect(again.list[0]).toBe(again);
  });

  it('compares a result with shared objects by what it promises for each value, no more, no less', () => {
    class Money {
      constructor(readonly cents: number) {}
      toJSON() {
        return (this.cents / 100).toFixed(2);
      }
    }
    class Registry extends Map<string, number> {}
    const shared = { id: 1 };
    const match = /a(b)/.exec('ab')!;
    const money = new Money(5);
    // Stored alone, so stored beside an object reached twice: what JSON writes of a class instance,
    // a Map subclass's entries in a Map, a match result's indices.
    expect(
      roundTrip({ total: money, again: money, r: new Registry([['a', 1]]), match, a: shared, b: shared }),
    ).toEqual({
      total: '0.05',
      again: '0.05',
      r: new Map([['a', 1]]),
      match: ['ab', 'b'],
      a: shared,
      b: shared,
    });
    // An empty object in a Set, put back as the Set's other member: refused.
    for (const other of [[], new Map([[1, 2]]), new Date(5), new Set([9])]) {
      const empty = {};
      expect(() => serializer.serialize({ x: empty, s: new Set<unknown>([empty, other]), z: other })).toThrow(
        /reached twice/,
      );
    }
  });

  it('writes an object with a toJSON of its own as superjson does, not as JSON does', () => {
    const hidden = <T extends object>(value: T) =>
      Object.defineProperty(value, 'toJSON', { value: () => 'replaced', enumerable: false });
    for (const value of [
      hidden({}),
      [[hidden({})]],
      { row: hidden({ id: 1, at: new Date(0) }) },
      hidden([1]),
    ]) {
      expect(serializer.serializeKnown!(value)).toBeUndefined();
      expect(serializer.serialize(value)).not.toContain('replaced');
    }
  });

  it('refuses an invalid Date and a function as the result, which would replay as null and undefined', () => {
    expect(() => serializer.serialize({ at: new Date(Number.NaN) })).toThrow(/invalid Date/);
    expect(() => serializer.serialize([[new Date(Number.NaN)]])).toThrow(/invalid Date/);
    expect(() => serializer.serialize(new Date(Number.NaN))).toThrow(/invalid Date/);
    expect(() => serializer.serialize(() => 3)).toThrow(/function/);
  });

  it('round-trips a DataView, bytes and type', () => {
    const back = roundTrip({ view: new DataView(new Uint8Array([0, 1, 2, 3]).buffer, 1, 2) }) as {
      view: DataView;
    };
    expect(back.view).toBeInstanceOf(DataView);
    expect([back.view.getUint8(0), back.view.getUint8(1), back.view.byteLength]).toEqual([1, 2, 2]);
  });

  it('brings an instance of a class of yours back as what JSON writes of it, as the README says', () => {
    class Order {
      id = 1;
      placedAt = new Date(0);
      total = new Decimal('12.50');
      tags = new Set(['a']);
      note = undefined;
      total2() {
        return 0;
      }
    }
    expect(roundTrip({ order: new Order() })).toStrictEqual({
      order: { id: 1, placedAt: '1970-01-01T00:00:00.000Z', total: '12.5', tags: {} },
    });
  });
});
