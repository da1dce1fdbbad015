import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { fingerprint, IdempotencyInputError } from '../../src/index.js';

// Class names change with a rename or a minifier; a retry that spans such a deploy must still match
// its first attempt. So a class instance is hashed as its own data, and built-ins are recognized by
// their internal slots, never by what their class is called.
const fp = (input: unknown) => fingerprint('orders.create', input);

class Money {
  constructor(
    readonly cents: number,
    readonly currency: string,
  ) {}
}
class Points {
  constructor(
    readonly cents: number,
    readonly currency: string,
  ) {}
}
/** What a minifier leaves of `Money`: the same class body under another name. */
const e = class {
  constructor(
    readonly cents: number,
    readonly currency: string,
  ) {}
};

describe('class instances', () => {
  it('hash as their own fields, whatever their class is called', () => {
    expect(fp({ price: new Points(5, 'EUR') })).toBe(fp({ price: new Money(5, 'EUR') }));
    expect(fp({ price: new e(5, 'EUR') })).toBe(fp({ price: new Money(5, 'EUR') }));
  });

  it('hash like a plain object with the same fields, as JSON, superjson and structuredClone see them', () => {
    expect(fp({ price: new Money(5, 'EUR') })).toBe(fp({ price: { currency: 'EUR', cents: 5 } }));
    expect(fp({ price: new Money(5, 'EUR') })).toBe(fp(structuredClone({ price: new Money(5, 'EUR') })));
  });

  it('are told apart by their fields', () => {
    expect(fp(new Money(5, 'EUR'))).not.toBe(fp(new Money(5, 'USD')));
    expect(fp(new Money(5, 'EUR'))).not.toBe(fp(new Money(6, 'EUR')));
  });

  it('hash as what toJSON() returns when they have one', () => {
    class Cents {
      constructor(readonly value: number) {}
      toJSON() {
        return { cents: this.value };
      }
    }
    expect(fp(new Cents(5))).toBe(fp({ cents: 5 }));
    expect(fp(new Cents(5))).not.toBe(fp(new Cents(6)));
  });
});

describe('built-in values', () => {
  it('hash a subclass like the built-in it extends', () => {
    class Samples extends Int16Array {}
    class Bag extends Map<string, number> {}
    class Stamp extends Date {}
    expect(fp(new Samples([1, 2]))).toBe(fp(new Int16Array([1, 2])));
    expect(fp(new Bag([['a', 1]]))).toBe(fp(new Map([['a', 1]])));
    expect(fp(new Stamp(0))).toBe(fp(new Date(0)));
  });

  it('hash a value from another realm (a vm context) like the same value from this one', () => {
    const foreign = runInNewContext(`({
      date: new Date(0),
      map: new Map([['a', 1]]),
      set: new Set([1]),
      bytes: new Uint8Array([1, 2]),
      samples: new Int16Array([1, 2]),
      pattern: /a/g,
      empty: {},
      nested: [{ a: 1 }],
    })`);
    const local = {
      date: new Date(0),
      map: new Map([['a', 1]]),
      set: new Set([1]),
      bytes: new Uint8Array([1, 2]),
      samples: new Int16Array([1, 2]),
      pattern: /a/g,
      empty: {},
      nested: [{ a: 1 }],
    };
    expect(fp(foreign)).toBe(fp(local));
  });

  it('refuses an object that only inherits from a built-in, with no value inside', () => {
    const fake = Object.create(Date.prototype);
    expect(() => fp({ at: fake })).toThrow(IdempotencyInputError);
  });
});
