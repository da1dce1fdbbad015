import { describe, expect, it } from 'vitest';
import { IdempotencyKeyInvalidError, parseKeyHeader, resolveKey, validateKey } from '../../src/index.js';

describe('parseKeyHeader', () => {
  it.each([
    [
      'an RFC 8941 sf-string',
      '"8e03978e-40d5-43e8-bc93-6894a57f9324"',
      '8e03978e-40d5-43e8-bc93-6894a57f9324',
    ],
    [
      'the bare form Stripe clients send',
      '8e03978e-40d5-43e8-bc93-6894a57f9324',
      '8e03978e-40d5-43e8-bc93-6894a57f9324',
    ],
    ['a bare key with surrounding spaces', '  abc  ', 'abc'],
    ['a bare key with surrounding tabs', '\tabc\t', 'abc'],
    ['an sf-string with an escaped quote', '"a\\"b"', 'a"b'],
    ['a single-element array (Node headers)', ['"k-1"'], 'k-1'],
    ['255 characters', 'x'.repeat(255), 'x'.repeat(255)],
  ])('accepts %s', (_name, header, key) => {
    expect(parseKeyHeader(header)).toBe(key);
  });

  it.each([[undefined], [null], [[]]])('returns undefined when the header is absent (%j)', (header) => {
    expect(parseKeyHeader(header)).toBeUndefined();
  });

  it.each([
    ['an empty value', ''],
    ['an empty sf-string', '""'],
    ['256 characters', 'x'.repeat(256)],
    ['a space inside a bare key', 'a b'],
    ['a non-ASCII character', 'clé'],
    ['a key after a no-break space (not HTTP whitespace)', '\u00a0abc'],
    ['a control character', 'a\u0001b'],
    ['two sf-strings (a repeated header joined by Node)', '"a", "b"'],
    ['a bare list', 'a, b'],
    ['a repeated header as an array', ['a', 'b']],
    ['an sf-string with parameters', '"a";p=1'],
    ['an sf-token instead of a string after a quote', '"unterminated'],
    ['an sf-string with a space inside', '"a b"'],
  ])('rejects %s with IDEMPOTENCY_KEY_INVALID', (_name, header) => {
    const error = (() => {
      try {
        parseKeyHeader(header as string);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(IdempotencyKeyInvalidError);
    expect((error as IdempotencyKeyInvalidError).code).toBe('IDEMPOTENCY_KEY_INVALID');
    expect((error as IdempotencyKeyInvalidError).status).toBe(400);
  });

  it('keeps Unicode spaces that are not HTTP whitespace, so two header values never name one key', () => {
    const anything = { pattern: /^.+$/su };
    expect(parseKeyHeader('\u00a0abc\u2003', anything)).toBe('\u00a0abc\u2003');
    expect(parseKeyHeader(' \u00a0abc ', anything)).toBe('\u00a0abc');
    expect(parseKeyHeader(' \ta  \t b\t ', anything)).toBe('a  \t b');
  });

  it('honours a configured policy', () => {
    expect(() => validateKey('abcdef', { maxLength: 4 })).toThrow(IdempotencyKeyInvalidError);
    expect(validateKey('ABCD', { pattern: /^[A-Z]+$/ })).toBe('ABCD');
    expect(() => validateKey('abcd', { pattern: /^[A-Z]+$/ })).toThrow(IdempotencyKeyInvalidError);
  });

  it('refuses a key with a NUL character or an unpaired surrogate, whatever the pattern lets through', () => {
    const anything = { pattern: /^[\s\S]+$/u };
    for (const key of ['k-\ud800', 'k-\udc00x', 'k-\u0000']) {
      expect(() => validateKey(key, anything), JSON.stringify(key)).toThrow(/NUL character or an unpaired/);
    }
    expect(validateKey('k-\ud83d\ude00', anything)).toBe('k-\ud83d\ude00');
  });

  it('takes every valid key with a pattern that has the g or y flag (a lastIndex kept between calls)', () => {
    for (const pattern of [/^[A-Z]+$/g, /^[A-Z]+$/y]) {
      expect(['ABCD', 'EFGH', 'IJKL'].map((key) => validateKey(key, { pattern }))).toEqual([
        'ABCD',
        'EFGH',
        'IJKL',
      ]);
    }
  });
});

describe('resolveKey', () => {
  it('takes whichever source is present', () => {
    expect(resolveKey('h', undefined)).toBe('h');
    expect(resolveKey(undefined, 'i')).toBe('i');
    expect(resolveKey(undefined, undefined)).toBeUndefined();
    expect(resolveKey('same', 'same')).toBe('same');
  });

  it('rejects a header and an input key that disagree', () => {
    expect(() => resolveKey('a', 'b')).toThrow(IdempotencyKeyInvalidError);
  });

  it('rejects a non-string input key', () => {
    expect(() => resolveKey(undefined, 42)).toThrow(IdempotencyKeyInvalidError);
  });
});
