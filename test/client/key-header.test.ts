import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { idempotencyHeaders } from '../../src/client/index.js';
import { keyHeaderValue } from '../../src/client/key-header.js';
import { parseKeyHeader } from '../../src/core/key.js';

describe('the Idempotency-Key header the clients send', () => {
  it('is read back by the server as the very key, for any key the server accepts (property)', () => {
    const visibleAscii = fc.string({
      unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
      minLength: 1,
      maxLength: 255,
    });
    fc.assert(
      fc.property(visibleAscii, (key) => {
        expect(parseKeyHeader(keyHeaderValue(key))).toBe(key);
      }),
      { numRuns: 2_000 },
    );
  });

  it('stays bare for the usual keys, and quotes one with a comma or a leading quote', () => {
    const uuid = '8e03978e-40d5-43e8-bc93-6894a57f9324';
    expect(keyHeaderValue(uuid)).toBe(uuid);
    expect(idempotencyHeaders({ op: { context: { idempotencyKey: 'order,42' } } })).toEqual({
      'Idempotency-Key': '"order,42"',
    });
    expect(keyHeaderValue('"quoted"')).toBe('"\\"quoted\\""');
  });
});
