import { serializeItem } from 'structured-headers';

/**
 * A key as an `Idempotency-Key` header value: bare, as Stripe's clients send it, unless the bare
 * form would be read otherwise (a comma reads as a list, a leading quote as an RFC 8941 string);
 * then as an RFC 8941 string, which the server unquotes.
 */
export function keyHeaderValue(key: string): string {
  return key.includes(',') || key.startsWith('"') ? serializeItem(key) : key;
}
