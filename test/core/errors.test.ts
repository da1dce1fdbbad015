import { describe, expect, it } from 'vitest';
import {
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  isIdempotencyError,
} from '../../src/index.js';

describe('isIdempotencyError', () => {
  it('recognizes the errors of this library, and ones that carry one of its codes', () => {
    expect(isIdempotencyError(new IdempotencyKeyInProgressError(1_000))).toBe(true);
    expect(isIdempotencyError(new IdempotencyKeyMismatchError(new Date()))).toBe(true);
    // An error from another copy of the package (or rebuilt from JSON) is told by its code.
    expect(isIdempotencyError(Object.assign(new Error('x'), { code: 'IDEMPOTENCY_KEY_MISMATCH' }))).toBe(
      true,
    );
  });

  it.each(['constructor', 'toString', '__proto__', 'hasOwnProperty', 'P2034', 'ECONNREFUSED'])(
    'does not take an error with code %j for one',
    (code) => {
      expect(isIdempotencyError(Object.assign(new Error('x'), { code }))).toBe(false);
    },
  );
});
