import type { HeaderValue } from './key.js';

/**
 * Request headers as servers expose them: a fetch `Headers`, Node's `IncomingHttpHeaders`, or a
 * plain object that keeps the client's spelling (an API Gateway event's).
 */
export type HeadersLike =
  | { get(name: string): string | null }
  | Readonly<Record<string, string | readonly string[] | undefined>>;

/** One header, case-insensitively. Repeated values come back joined or as a list, for the parser to refuse. */
export function headerOf(headers: HeadersLike | undefined, name: string): HeaderValue {
  if (!headers) return undefined;
  if (typeof headers.get === 'function') return (headers as { get(name: string): string | null }).get(name);
  const wanted = name.toLowerCase();
  for (const [field, value] of Object.entries(headers)) {
    if (field.toLowerCase() === wanted) return value as HeaderValue;
  }
  return undefined;
}

/**
 * The headers of a WebSocket's upgrade request (tRPC's ws adapter, graphql-ws): they speak for
 * every call the socket carries, so none of them is one call's key or attempt.
 */
export function isWebSocketUpgrade(headers: HeadersLike | undefined): boolean {
  const upgrade = headerOf(headers, 'upgrade');
  return typeof upgrade === 'string' && upgrade.toLowerCase() === 'websocket';
}
