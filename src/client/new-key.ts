/**
 * The default `generateKey`: a UUID v4 from `crypto.randomUUID`, which a page served over plain
 * http and React Native lack; the error says to pass `generateKey` there.
 */
export function randomKey(): string {
  if (typeof globalThis.crypto?.randomUUID !== 'function') {
    throw new TypeError(
      'crypto.randomUUID is not available here (a page served over plain http, React Native): pass generateKey to the client, a function returning a new unique key (a UUID v4) on each call',
    );
  }
  return globalThis.crypto.randomUUID();
}

/** A key from `generateKey`, checked as it is made: a non-empty string. */
export function newKey(generateKey: () => string): string {
  const key: unknown = generateKey();
  if (typeof key === 'string' && key !== '') return key;
  throw new TypeError(
    `generateKey must return a non-empty string, and returned ${typeof key === 'string' ? 'an empty one' : String(key)}`,
  );
}
