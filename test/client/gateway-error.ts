import type { Decide } from '../../examples/shared/fault-proxy.js';

/** nginx's page for a 502: its connection to the server broke before the answer came back. */
export const NGINX_502 =
  '<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>';

/**
 * A fault proxy's decisions: the first request reaches `server`, which answers in full (it
 * committed), and the proxy answers `502` with nginx's page in its place; later requests are
 * forwarded.
 */
export function badGatewayAfterCommit(server: string): Decide {
  return async (request, index) => {
    if (index > 0) return 'forward';
    const headers = new Headers();
    for (const [name, value] of Object.entries(request.headers)) {
      if (typeof value === 'string' && !['host', 'connection', 'content-length'].includes(name))
        headers.set(name, value);
    }
    const url = new URL(request.url, server);
    await (await fetch(url, { method: request.method, headers, body: request.body })).text();
    return { status: 502, headers: { 'content-type': 'text/html' }, body: NGINX_502 };
  };
}
