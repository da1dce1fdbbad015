import { parseItem } from 'structured-headers';
import { IdempotencyKeyInvalidError } from './errors.js';

/** What counts as a well-formed key. */
export interface KeyPolicy {
  /**
   * Longest key accepted, in characters. Past 255, widen the `idempotency_key` column first
   * (it is `VARCHAR(255)` on MySQL/MariaDB).
   * @default 255
   */
  maxLength?: number | undefined;
  /**
   * Characters a key may contain.
   * @default /^[\x21-\x7E]+$/ (visible ASCII)
   */
  pattern?: RegExp | undefined;
}

const VISIBLE_ASCII = /^[\x21-\x7E]+$/;

/** The raw shapes a header value arrives in across Node, fetch and framework adapters. */
export type HeaderValue = string | readonly string[] | null | undefined;

/**
 * Reads an `Idempotency-Key` header value. Accepts the IETF form (an RFC 8941 sf-string,
 * `"8e03978e-…"`) and the bare form Stripe clients send (`8e03978e-…`). Returns `undefined` when
 * the header is absent; throws `IDEMPOTENCY_KEY_INVALID` for several values, a list, or a bad key,
 * naming the header `header`.
 */
export function parseKeyHeader(
  value: HeaderValue,
  policy?: KeyPolicy,
  header = 'Idempotency-Key',
): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value !== 'string') {
    if (value.length === 0) return undefined;
    if (value.length > 1) {
      throw new IdempotencyKeyInvalidError(`${header} must be sent once, not repeated`);
    }
    return parseKeyHeader(value[0], policy, header);
  }
  const trimmed = withoutOptionalWhitespace(value);
  if (trimmed.startsWith('"')) {
    let item: ReturnType<typeof parseItem>;
    try {
      item = parseItem(trimmed);
    } catch (cause) {
      // Node joins repeated headers with ", ", which lands here as trailing characters.
      throw new IdempotencyKeyInvalidError(
        `${header} is not a single RFC 8941 string (repeated header or a list?)`,
        { cause },
      );
    }
    const [bare, params] = item;
    if (typeof bare !== 'string' || params.size > 0) {
      throw new IdempotencyKeyInvalidError(`${header} must be a plain string`);
    }
    return validateKey(bare, policy);
  }
  // A bare key cannot contain a comma: that is how repeated headers are joined.
  if (trimmed.includes(',')) {
    throw new IdempotencyKeyInvalidError(`${header} must be sent once, not as a list`);
  }
  return validateKey(trimmed, policy);
}

/** Checks a key from any source against the policy and returns it unchanged. */
export function validateKey(key: unknown, policy: KeyPolicy = {}): string {
  const { maxLength = 255, pattern = VISIBLE_ASCII } = policy;
  if (typeof key !== 'string') {
    throw new IdempotencyKeyInvalidError(`The idempotency key must be a string, not ${typeof key}`);
  }
  if (key.length === 0 || key.length > maxLength) {
    throw new IdempotencyKeyInvalidError(
      `The idempotency key must be 1 to ${maxLength} characters long (got ${key.length})`,
    );
  }
  // `search`, not `test`: a pattern with the `g` or `y` flag keeps a `lastIndex` between calls with
  // `test`, and would refuse every other valid key.
  if (key.search(pattern) === -1) {
    throw new IdempotencyKeyInvalidError(
      'The idempotency key contains characters outside the allowed set (visible ASCII by default)',
    );
  }
  // Whatever the pattern lets through.
  if (storedAsAnother(key)) {
    throw new IdempotencyKeyInvalidError(
      'The idempotency key holds a NUL character or an unpaired UTF-16 surrogate, which a database would store as another key',
    );
  }
  return key;
}

/**
 * Whether a database would store `text` (a key, a scope, a step's name) as another text: it holds a
 * NUL character (PostgreSQL refuses it) or an unpaired UTF-16 surrogate (PostgreSQL and MariaDB
 * write U+FFFD in its place; with the `u` flag, `\p{Cs}` matches only an unpaired one).
 */
export function storedAsAnother(text: string): boolean {
  return text.includes('\u0000') || /\p{Cs}/u.test(text);
}

/**
 * Picks the one key of a request from its two possible sources. Both present and different is
 * `IDEMPOTENCY_KEY_INVALID`, its message naming the two as `names` says; neither present is
 * `undefined`.
 */
export function resolveKey(
  fromHeader: string | undefined,
  fromInput: unknown,
  policy?: KeyPolicy,
  names: { header: string; input: string } = { header: 'Idempotency-Key', input: 'idempotencyKey input' },
): string | undefined {
  const inputKey = fromInput === undefined || fromInput === null ? undefined : validateKey(fromInput, policy);
  if (fromHeader !== undefined && inputKey !== undefined && fromHeader !== inputKey) {
    throw new IdempotencyKeyInvalidError(`The ${names.header} header and the ${names.input} disagree`);
  }
  return fromHeader ?? inputKey;
}

/**
 * Refuses a header key on a request that carries several calls (a tRPC batch, a GraphQL batch of
 * operations): it could belong to any of them. `instead` says where each call's own key goes.
 */
export function refuseHeaderKeyOnBatch(
  headerKey: string | undefined,
  batched: boolean,
  header: string,
  instead: string,
): void {
  if (headerKey !== undefined && batched) {
    throw new IdempotencyKeyInvalidError(
      `An ${header} header on a batch of several calls is ambiguous: ${instead}, or do not batch mutations`,
    );
  }
}

/**
 * `value` without HTTP's optional whitespace (space, tab) around it: `trim()` would also drop a
 * no-break space and other Unicode spaces, and two different header values would name one key. A
 * loop, since a regular expression for the end rescans every run of spaces inside a long value.
 */
function withoutOptionalWhitespace(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && isOptionalWhitespace(value.charCodeAt(start))) start++;
  while (end > start && isOptionalWhitespace(value.charCodeAt(end - 1))) end--;
  return value.slice(start, end);
}

function isOptionalWhitespace(unit: number): boolean {
  return unit === 0x20 || unit === 0x09;
}
