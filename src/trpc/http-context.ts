import type { HeadersLike } from '../core/headers.js';

/** The context fields the defaults look at; all optional, since the context is the user's. */
interface HttpContext {
  req?: { headers?: HeadersLike; url?: unknown };
  headers?: HeadersLike;
  res?: { setHeader?(name: string, value: string): unknown; header?(name: string, value: string): unknown };
  resHeaders?: { set(name: string, value: string): void };
  info?: { calls?: unknown };
}

const fieldsOf = (ctx: unknown): HttpContext => (typeof ctx === 'object' && ctx !== null ? ctx : {});

/**
 * The request headers of the standalone / Node adapters (`ctx.req.headers`), the fetch adapter
 * (`ctx.req` is the `Request`), or a plain `ctx.headers`.
 */
export function requestHeadersOf(ctx: unknown): HeadersLike | undefined {
  const { req, headers } = fieldsOf(ctx);
  return req?.headers ?? headers;
}

/**
 * Sets a response header through `ctx.res.setHeader` (Node adapters), `ctx.res.header` (Fastify's
 * reply) or `ctx.resHeaders` (fetch adapter), when the context carries one. A response already
 * under way is left alone.
 */
export function setResponseHeader(ctx: unknown, name: string, value: string): void {
  const { res, resHeaders } = fieldsOf(ctx);
  try {
    if (typeof res?.setHeader === 'function') res.setHeader(name, value);
    else if (typeof res?.header === 'function') res.header(name, value);
    else resHeaders?.set(name, value);
  } catch {
    // Headers already sent (a streamed response): the signal in the context still holds.
  }
}

/**
 * How many procedure calls the HTTP request carries. Read from `ctx.info` (the `TRPCRequestInfo`
 * that `createContext` receives, when it passes it on), else from the request URL (`?batch=1` and
 * comma-separated paths, tRPC's wire format), else from the call's own `batchIndex`.
 */
export function callsInRequest(ctx: unknown, batchIndex: number): number {
  const { info, req } = fieldsOf(ctx);
  if (Array.isArray(info?.calls)) return Math.max(info.calls.length, batchIndex + 1);
  // tRPC marks a batch with `?batch=1`: a URL without a query is never one.
  if (typeof req?.url === 'string' && req.url.includes('?')) {
    try {
      const url = new URL(req.url, 'http://localhost');
      if (url.searchParams.get('batch') === '1') {
        const paths = decodeURIComponent(url.pathname).split(',').length;
        return Math.max(paths, batchIndex + 1);
      }
    } catch {
      // Not a URL we can read: fall back to the batch index.
    }
  }
  return batchIndex + 1;
}

/** The procedure a call runs inside, and whether the request URL, not `ctx.info`, said so. */
export interface EnclosingCall {
  path: string;
  fromUrl: boolean;
}

/**
 * The procedure the HTTP request itself calls at `batchIndex`, when it is not `path`: `path` is
 * then called inside it (a server-side caller made from its context), and the request's headers
 * are that call's, not this one's. Read from `ctx.info` (what `createContext` passed on), else
 * from the request URL, whose path ends with the called procedure's (comma-separated in a batch);
 * `undefined` when the call is the request's own, or the context does not show it.
 */
export function enclosingCallOf(ctx: unknown, path: string, batchIndex: number): EnclosingCall | undefined {
  const { info, req } = fieldsOf(ctx);
  if (Array.isArray(info?.calls)) {
    const called = (info.calls[batchIndex] as { path?: unknown } | undefined)?.path;
    return typeof called === 'string' && called !== '' && !namesPath(called, path)
      ? { path: called, fromUrl: false }
      : undefined;
  }
  if (typeof req?.url !== 'string') return undefined;
  let called: string | undefined;
  try {
    const pieces = decodeURIComponent(new URL(req.url, 'http://localhost').pathname).split(',');
    const piece = pieces[pieces.length > 1 ? batchIndex : 0];
    called = piece?.slice(piece.lastIndexOf('/') + 1);
  } catch {
    // Not a URL we can read: the call is taken to be the request's own.
  }
  return called && !namesPath(called, path) ? { path: called, fromUrl: true } : undefined;
}

/** What tRPC's `pathSeparator` may be besides `.` (its `PathSeparator` type). */
const PATH_SEPARATORS = ['_', '~', '-'];

/**
 * Whether `called` names the procedure at `path`: the same, or its segments joined by another
 * separator tRPC allows, as a URL spells them under its `pathSeparator` (`billing~pay` for
 * `billing.pay`).
 */
function namesPath(called: string, path: string): boolean {
  if (called === path) return true;
  if (!path.includes('.')) return false;
  const segments = path.split('.');
  return PATH_SEPARATORS.some((separator) => segments.join(separator) === called);
}
