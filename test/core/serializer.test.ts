import { Decimal } from '@prisma/client/runtime/client';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { superjsonSerializer } from '../../src/index.js';

describe('superjsonSerializer', () => {
  const serializer = superjsonSerializer({ Decimal });
  const roundTrip = (value: unknown) => serializer.deserialize(serializer.serialize(value));

  it('round-trips any JSON value (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        // superjson refuses these keys (prototype pollution guard); see the test below.
        fc.pre(!/"(__proto__|prototype|constructor)":/.test(JSON.stringify(value)));
        expect(roundTrip(value)).toEqual(value);
      }),
    );
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
});
