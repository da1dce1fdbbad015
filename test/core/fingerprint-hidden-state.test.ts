import { runInNewContext } from 'node:vm';
import { Decimal } from '@prisma/client/runtime/client';
import { describe, expect, it } from 'vitest';
import { fingerprint, IdempotencyInputError } from '../../src/index.js';

// A value whose meaning lives outside its own enumerable fields (non-enumerable properties, internal
// slots, symbol keys) cannot be hashed from those fields: two inputs differing only there would share
// a fingerprint, and a key reused with the other input would replay instead of answering 422.
const fp = (input: unknown) => fingerprint('payments.refund', input);

const kCents = Symbol('cents');
class HiddenCents {
  readonly currency = 'EUR';
  constructor(cents: number) {
    Object.defineProperty(this, 'cents', { value: cents, enumerable: false });
  }
}
class SymbolCents {
  readonly currency = 'EUR';
  [kCents]: number;
  constructor(cents: number) {
    this[kCents] = cents;
  }
}
class PaymentError extends Error {
  readonly code = 'CARD_DECLINED';
}

describe('values whose state the fingerprint cannot see', () => {
  it('refuses an Error even when it has enumerable fields, since its message is not one', () => {
    const declined = (message: string) => ({ reason: Object.assign(new Error(message), { code: 'E1' }) });
    expect(() => fp(declined('card declined'))).toThrow(IdempotencyInputError);
    expect(() => fp(declined('card declined'))).toThrow(/Error.*error\.message/);
  });

  it.each([
    ['an Error subclass with a field', new PaymentError('declined')],
    ['a TypeError', new TypeError('x')],
    ['an AggregateError', new AggregateError([new Error('a')], 'x')],
    ['a DOMException', new DOMException('x', 'AbortError')],
    [
      'an Error from another realm, with a field',
      runInNewContext("Object.assign(new Error('x'), { code: 1 })"),
    ],
    ['a boxed string', new String('ab')],
    ['a boxed number', new Number(1)],
    ['a boxed bigint', Object(1n)],
    ['URLSearchParams with a field of its own', Object.assign(new URLSearchParams('a=1'), { note: 'x' })],
    ['Headers', new Headers({ a: '1' })],
    ['a Promise', Promise.resolve(1)],
    ['a WeakMap', new WeakMap()],
    ['a SharedArrayBuffer', new SharedArrayBuffer(4)],
    ['a class instance with a non-enumerable field', new HiddenCents(5)],
    ['a class instance with a symbol-keyed field', new SymbolCents(5)],
  ])('refuses %s with IDEMPOTENCY_INPUT_UNSUPPORTED', (_name, value) => {
    let thrown: unknown;
    try {
      fp({ value });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(IdempotencyInputError);
    expect((thrown as IdempotencyInputError).code).toBe('IDEMPOTENCY_INPUT_UNSUPPORTED');
  });
});

class ZonedDate extends Date {
  constructor(
    time: number,
    readonly zone: string,
  ) {
    super(time);
  }
}
const form = new FormData();
form.set('a', '1');
class Money extends Decimal {
  constructor(
    amount: string,
    readonly currency: string,
  ) {
    super(amount);
  }
}

describe('built-in values that carry fields of their own', () => {
  it.each([
    ['a Date', Object.assign(new Date(0), { zone: 'Europe/Paris' })],
    ['a Date subclass with a field', new ZonedDate(0, 'Europe/Paris')],
    ['a Map', Object.assign(new Map(), { note: 'x' })],
    ['a Set', Object.assign(new Set(), { note: 'x' })],
    ['a RegExp', Object.assign(/a/, { note: 'x' })],
    ['an ArrayBuffer', Object.assign(new ArrayBuffer(1), { note: 'x' })],
    ['a DataView', Object.assign(new DataView(new ArrayBuffer(1)), { note: 'x' })],
    ['FormData', Object.assign(form, { note: 'x' })],
    ['a Decimal', Object.assign(new Decimal('10'), { currency: 'USD' })],
    ['a Decimal subclass with a field', new Money('10', 'USD')],
  ])('refuses %s, whose tag would hold only its value', (_name, value) => {
    expect(() => fp({ value })).toThrow(IdempotencyInputError);
    expect(() => fp({ value })).toThrow(/fields of its own/);
  });

  it('hashes a Decimal by its value, its own fields being only decimal.js’s', () => {
    expect(fp({ amount: new Decimal('10.50') })).toBe(fp({ amount: new Decimal('10.5') }));
    expect(fp({ amount: new Decimal('10.5') })).not.toBe(fp({ amount: new Decimal('10.51') }));
  });

  it('hashes a RegExp by its source and flags, not by where its last match stopped', () => {
    const used = /a/g;
    used.test('aaa');
    expect(used.lastIndex).toBe(1);
    expect(fp({ pattern: used })).toBe(fp({ pattern: /a/g }));
    expect(fp({ pattern: /a/g })).not.toBe(fp({ pattern: /a/y }));
  });
});
