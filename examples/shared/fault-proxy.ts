import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * What the proxy does with one request:
 * - `forward`: passes the request to the server and the response back;
 * - `lose-response`: forwards, lets the server answer in full (it committed), then destroys the
 *   client's connection before a byte of the response reaches it: the classic lost response;
 * - `cut-after-request`: forwards, then destroys the client's connection at once while the server
 *   is still working (a client-side timeout);
 * - `drop-request`: destroys the client's connection; the server never sees the request;
 * - `{ status, headers, body }`: answers itself, without forwarding.
 */
export type ProxyAction =
  | 'forward'
  | 'lose-response'
  | 'cut-after-request'
  | 'drop-request'
  | { status: number; headers?: Record<string, string>; body?: string };

/** One request the proxy received, and what became of it. */
export interface ProxiedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  action: ProxyAction;
  /** When the proxy received it (`performance.now()`). */
  at: number;
  /** The status the server (or the proxy itself) answered with; unset when it never answered. */
  status?: number;
  /** The headers of that answer. */
  responseHeaders?: IncomingHttpHeaders;
  /** Its body, as text. */
  responseBody?: string;
  /** Whether the client received the response. */
  delivered: boolean;
}

/** Picks the action of the `index`-th request (from 0). */
export type Decide = (request: ProxiedRequest, index: number) => ProxyAction | Promise<ProxyAction>;

/** A fault-injecting HTTP proxy on loopback, in front of one real server. */
export interface FaultProxy {
  /** `http://127.0.0.1:<port>`: point the client here. */
  readonly url: string;
  /** Every request received, in order. */
  readonly requests: ProxiedRequest[];
  /** Queues actions for the next requests, one each; once they are used up, requests are forwarded. */
  plan(...actions: ProxyAction[]): void;
  /**
   * Decides the action of every request not covered by `plan` (default: `forward`); it may wait,
   * e.g. until the server has started on an earlier request, before the request goes on.
   */
  behave(decide: Decide): void;
  /** Resolves once every forwarded request has had its answer from the server. */
  settled(): Promise<void>;
  close(): Promise<void>;
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);
const MAX_BODY_BYTES = 1_048_576;
const MAX_REQUESTS = 1_000;
const UPSTREAM_TIMEOUT_MS = 30_000;
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length']);

/** Starts a proxy on 127.0.0.1 (a free port) in front of `target`, which must be on loopback too. */
export async function startFaultProxy(target: string): Promise<FaultProxy> {
  const upstream = new URL(target);
  if (!LOOPBACK.has(upstream.hostname))
    throw new Error(`The fault proxy only fronts loopback, not ${target}`);
  const requests: ProxiedRequest[] = [];
  const planned: ProxyAction[] = [];
  const inFlight = new Set<Promise<unknown>>();
  let decide: Decide = () => 'forward';

  const server = createServer(async (req, res) => {
    const body = await readBody(req).catch(() => undefined);
    if (body === undefined || requests.length >= MAX_REQUESTS) {
      res.writeHead(413).end();
      return;
    }
    const entry: ProxiedRequest = {
      method: req.method ?? 'GET',
      url: req.url ?? '/',
      headers: req.headers,
      body,
      at: performance.now(),
      action: 'forward',
      delivered: false,
    };
    const index = requests.push(entry) - 1;
    entry.action = planned.shift() ?? (await decide(entry, index));
    const { action } = entry;

    if (action === 'drop-request') return void req.socket.destroy();
    if (typeof action === 'object') {
      entry.status = action.status;
      entry.responseHeaders = Object.fromEntries(
        Object.entries(action.headers ?? {}).map(([name, value]) => [name.toLowerCase(), value]),
      );
      entry.responseBody = action.body ?? '';
      entry.delivered = true;
      res.writeHead(action.status, action.headers).end(action.body ?? '');
      return;
    }
    const answer = forward(upstream, entry);
    inFlight.add(answer);
    answer.finally(() => inFlight.delete(answer)).catch(() => undefined);
    if (action === 'cut-after-request') {
      // The proxy's own connection to the server stays open: the server gets the whole request
      // and finishes it, while the client has already given up.
      req.socket.destroy();
      const response = await answer.catch(() => undefined);
      entry.status = response?.status;
      entry.responseHeaders = response?.headers;
      entry.responseBody = response?.body.toString('utf8');
      return;
    }
    try {
      const response = await answer;
      entry.status = response.status;
      entry.responseHeaders = response.headers;
      entry.responseBody = response.body.toString('utf8');
      if (action === 'lose-response') return void req.socket.destroy();
      reply(res, response);
      entry.delivered = true;
    } catch {
      req.socket.destroy();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    plan: (...actions) => void planned.push(...actions),
    behave: (next) => {
      decide = next;
    },
    settled: async () => {
      while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

interface UpstreamResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** Sends the request to the server and reads its whole response. */
function forward(upstream: URL, entry: ProxiedRequest): Promise<UpstreamResponse> {
  return new Promise((resolve, reject) => {
    const headers = { ...entry.headers, host: upstream.host };
    delete headers.connection;
    const req = httpRequest(
      {
        host: upstream.hostname.replace(/^\[|\]$/g, ''),
        port: upstream.port,
        method: entry.method,
        path: entry.url,
        headers,
        agent: false,
        timeout: UPSTREAM_TIMEOUT_MS,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 502, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('upstream timeout')));
    req.on('error', reject);
    req.end(entry.body);
  });
}

function reply(res: ServerResponse, response: UpstreamResponse): void {
  for (const [name, value] of Object.entries(response.headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) res.setHeader(name, value);
  }
  res.setHeader('content-length', response.body.length);
  res.writeHead(response.status).end(response.body);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        req.destroy();
        reject(new Error('body too large'));
      } else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
