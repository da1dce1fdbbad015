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
  for (const field of Object.keys(headers)) {
    if (field.toLowerCase() === wanted) return (headers as Record<string, HeaderValue>)[field];
  }
  return undefined;
}

/**
 * The request headers a call may read its key and attempt from: none of a WebSocket's upgrade
 * request (tRPC's ws adapter, graphql-ws), whose headers speak for every call the socket carries;
 * `overSocket` says they were that.
 */
export function callHeaders(headers: HeadersLike | undefined): {
  headers: HeadersLike | undefined;
  overSocket: boolean;
} {
  const upgrade = headerOf(headers, 'upgrade');
  const overSocket = typeof upgrade === 'string' && upgrade.toLowerCase() === 'websocket';
  return { headers: overSocket ? undefined : headers, overSocket };
}
