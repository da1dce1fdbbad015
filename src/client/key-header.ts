import { serializeItem } from 'structured-headers';

/**
 * What a header value carries as it is: no control character (a newline would end the header),
 * nothing past Latin-1 (`fetch` refuses it), no white space at either end (`fetch` strips it).
 */
const BARE = /^(?:[\x21-\x7E\x80-\xFF](?:[\x20-\x7E\x80-\xFF]*[\x21-\x7E\x80-\xFF])?)?$/;
/** What an RFC 8941 string can hold. */
const PRINTABLE_ASCII = /^[\x20-\x7E]*$/;

/** A key no header can carry. Thrown before anything is sent, and never retried. */
export class UnsendableKeyError extends TypeError {
  override name = 'UnsendableKeyError';
}

/**
 * A key as an `Idempotency-Key` header value: bare, as Stripe's clients send it, unless the bare
 * form would be read otherwise (a comma reads as a list, a leading quote as an RFC 8941 string);
 * then as an RFC 8941 string, which the server unquotes. Throws `UnsendableKeyError` for a key a
 * header cannot carry.
 */
export function keyHeaderValue(key: string): string {
  const quoted = key.includes(',') || key.startsWith('"');
  if (quoted ? PRINTABLE_ASCII.test(key) : BARE.test(key)) return quoted ? serializeItem(key) : key;
  throw new UnsendableKeyError(
    `The idempotency key ${JSON.stringify(key)} cannot be sent as a header: a header value holds no control character (a newline), nothing past Latin-1 and no space at either end, and a key with a comma or a leading quote only printable ASCII. Nothing was sent; use a key of visible ASCII, as the server expects by default`,
  );
}
