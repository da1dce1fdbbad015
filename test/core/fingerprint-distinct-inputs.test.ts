import { describe, expect, it } from 'vitest';
import { fingerprint, IdempotencyInputError } from '../../src/index.js';

// Two different validated inputs never share a fingerprint, or a retry with another input would
// replay the first answer instead of IDEMPOTENCY_KEY_MISMATCH: values whose content `Object.keys`
// does not see (FormData, ArrayBuffer, RegExp, …) are hashed by what they hold.
const fp = (input: unknown) => fingerprint('files.upload', input);
const form = (value: string) => {
  const f = new FormData();
  f.set('name', value);
  return f;
};

const withFile = () => {
  const f = new FormData();
  f.set('upload', new File(['a'], 'a.txt'));
  return f;
};

describe('inputs the fingerprint used to confuse', () => {
  it('FormData (a tRPC v11 input type) with different fields', () => {
    expect(fp(form('a'))).not.toBe(fp(form('b')));
  });
  it('File / Blob: refused, their content cannot be read synchronously', () => {
    expect(() => fp(new File(['a'], 'a.txt'))).toThrow(IdempotencyInputError);
    expect(() => fp({ attachment: new Blob(['a']) })).toThrow(IdempotencyInputError);
    expect(() => fp(withFile())).toThrow(IdempotencyInputError);
  });
  it('a File of another class (Yoga hands resolvers @whatwg-node’s): refused too, not hashed by its lastModified', () => {
    class OtherFile {
      readonly type = 'text/plain';
      readonly lastModified = Date.now();
      constructor(readonly name: string) {}
      get size() {
        return 1;
      }
      arrayBuffer() {
        return Promise.resolve(new ArrayBuffer(1));
      }
      stream() {
        return new ReadableStream();
      }
      slice() {
        return this;
      }
    }
    expect(() => fp({ upload: new OtherFile('a.txt') })).toThrow(IdempotencyInputError);
  });
  it('ArrayBuffer with different bytes, and an ArrayBuffer vs {}', () => {
    expect(fp(new Uint8Array([1]).buffer)).not.toBe(fp(new Uint8Array([2]).buffer));
    expect(fp(new ArrayBuffer(4))).not.toBe(fp({}));
  });
  it('typed arrays other than Uint8Array vs a plain object / each other', () => {
    expect(fp(new Int16Array([1, 2]))).not.toBe(fp({ 0: 1, 1: 2 }));
    expect(fp(new Float64Array([1]))).not.toBe(fp(new Int8Array([1])));
  });
  it('every kind of typed array, and a DataView, over the same bytes', () => {
    const bytes = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]).buffer;
    const views = [
      Int8Array,
      Uint8Array,
      Uint8ClampedArray,
      Int16Array,
      Uint16Array,
      Int32Array,
      Uint32Array,
      Float32Array,
      Float64Array,
      BigInt64Array,
      BigUint64Array,
      DataView,
    ].map((View) => fp(new (View as new (buffer: ArrayBuffer) => ArrayBufferView)(bytes)));
    expect(new Set(views).size).toBe(views.length);
    expect(fp(new Float64Array([-0]))).not.toBe(fp(new Float64Array([0])));
  });
  it('a sparse array with one hole vs an empty array', () => {
    // biome-ignore lint/suspicious/noSparseArray: the point of the test
    expect(fp([,])).not.toBe(fp([]));
  });
  it('RegExp values; an Error, which shows no fields, is refused', () => {
    expect(fp({ pattern: /a/ })).not.toBe(fp({ pattern: /b/ }));
    expect(fp({ pattern: /a/ })).not.toBe(fp({ pattern: '/a/' }));
    expect(() => fp({ error: new Error('x') })).toThrow(IdempotencyInputError);
  });
  it('class instances with different fields', () => {
    class Money {
      constructor(readonly cents: number) {}
    }
    expect(fp(new Money(5))).not.toBe(fp(new Money(6)));
    expect(fp(new Money(5))).toBe(fp(new Money(5)));
  });
});
