import { describe, expect, it } from 'vitest';
import { headerOf } from '../../src/core/headers.js';

describe('headerOf', () => {
  it("reads a fetch Headers through get(), and Node's lowercase names", () => {
    expect(headerOf(new Headers({ 'Idempotency-Key': 'k' }), 'Idempotency-Key')).toBe('k');
    expect(headerOf({ 'idempotency-key': 'k', host: 'h' }, 'Idempotency-Key')).toBe('k');
  });

  it("reads a plain object's names case-insensitively (an API Gateway event keeps the client's spelling)", () => {
    expect(headerOf({ 'IDEMPOTENCY-KEY': 'k' }, 'idempotency-key')).toBe('k');
    expect(headerOf({ host: 'h' }, 'Idempotency-Key')).toBeUndefined();
    expect(headerOf(undefined, 'Idempotency-Key')).toBeUndefined();
  });

  it('takes the first of two spellings in the object, whichever is lowercase', () => {
    expect(headerOf({ 'Idempotency-Key': 'first', 'idempotency-key': 'second' }, 'Idempotency-Key')).toBe(
      'first',
    );
    expect(headerOf({ 'idempotency-key': 'first', 'Idempotency-Key': 'second' }, 'Idempotency-Key')).toBe(
      'first',
    );
  });

  it('reads no member that is not an enumerable one of its own', () => {
    const hidden = Object.defineProperty({}, 'idempotency-key', { value: 'hidden', enumerable: false });
    expect(headerOf(hidden, 'Idempotency-Key')).toBeUndefined();
    expect(headerOf(Object.create({ 'idempotency-key': 'inherited' }), 'Idempotency-Key')).toBeUndefined();
  });
});
