import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { httpLink, TRPCClientError, type TRPCLink } from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';
import { observable } from '@trpc/server/observable';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CutOffAnswerError,
  type FetchFunction,
  idempotencyHeaders,
  idempotencyLink,
  idempotentFetch,
  retryingProxyErrors,
} from '../../src/client/index.js';
import { clientOf } from './link-client.js';

const retry = { attempts: 3, baseDelayMs: 1, maxDelayMs: 5 };
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

/**
 * A server that answers every request with `status` and `body`, its `Idempotency-Attempt` and
 * `Idempotency-Key` written down; with `cut`, the connection drops after the body's first 100 bytes.
 */
async function answering(status: number, body: string, { cut = false, type = 'application/json' } = {}) {
  const attempts: (string | undefined)[] = [];
  const keys: (string | undefined)[] = [];
  const server = createServer((request, response) => {
    attempts.push(request.headers['idempotency-attempt'] as string | undefined);
    keys.push(request.headers['idempotency-key'] as string | undefined);
    request.resume();
    request.on('end', () => {
      response.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
      if (!cut) return response.end(body);
      response.write(body.slice(0, 100));
      setTimeout(() => response.socket?.destroy(), 20);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => server.close(resolve)));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, attempts, keys };
}

const outcomeUnknown = (code: string) =>
  JSON.stringify({ errors: [{ message: 'outcome unknown '.repeat(100), extensions: { code } }] });

describe('idempotentFetch and an answer whose body is cut off', () => {
  it.each([
    [500, 'IDEMPOTENCY_OUTCOME_UNKNOWN'],
    [422, 'IDEMPOTENCY_KEY_MISMATCH'],
  ])('does not send again after a %i %s: its status already said not to', async (status, code) => {
    const server = await answering(status, outcomeUnknown(code), { cut: true });
    const error = await idempotentFetch(fetch, { retry })(`${server.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'mutation { pay }' }),
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    expect(server.attempts).toEqual(['1']);
  });

  it('sends again after a success whose body is cut off: the next attempt replays it', async () => {
    const server = await answering(200, JSON.stringify({ data: { pay: 'x'.repeat(500) } }), { cut: true });
    await idempotentFetch(fetch, { retry })(`${server.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'mutation { pay }' }),
    }).catch(() => undefined);
    expect(server.attempts).toEqual(['1', '2', '3']);
  });
});

describe('idempotencyLink behind retryingProxyErrors and an answer whose body is cut off', () => {
  const trpcError = (httpStatus: number, idempotencyCode: string) =>
    JSON.stringify({
      error: {
        message: 'outcome unknown '.repeat(20),
        code: -32603,
        data: { code: 'INTERNAL_SERVER_ERROR', httpStatus, idempotencyCode },
      },
    });
  const send = async (server: { url: string }) => {
    const client = clientOf({
      links: [
        idempotencyLink({ retry }),
        httpLink({ url: server.url, headers: idempotencyHeaders, fetch: retryingProxyErrors() }),
      ],
    });
    return client.pay.mutate({ amount: 5 }).catch((e: unknown) => e as TRPCClientError<AnyTRPCRouter>);
  };

  it('does not send again after a 500 IDEMPOTENCY_OUTCOME_UNKNOWN: its status already said not to', async () => {
    const server = await answering(500, trpcError(500, 'IDEMPOTENCY_OUTCOME_UNKNOWN'), { cut: true });
    const error = await send(server);
    expect(server.attempts).toEqual(['1']);
    expect(error).toBeInstanceOf(TRPCClientError);
    expect((error as TRPCClientError<AnyTRPCRouter>).cause).toBeInstanceOf(CutOffAnswerError);
    expect((error as TRPCClientError<AnyTRPCRouter>).meta?.idempotencyKey).toBe(server.keys[0]);
  });

  it('sends again, with the same key, after a 409 cut off: its status says to', async () => {
    const server = await answering(409, trpcError(409, 'IDEMPOTENCY_KEY_IN_PROGRESS'), { cut: true });
    await send(server);
    expect(server.attempts).toEqual(['1', '2', '3']);
    expect(new Set(server.keys).size).toBe(1);
  });

  it('returns a whole failed answer as it came', async () => {
    const server = await answering(422, trpcError(422, 'IDEMPOTENCY_KEY_MISMATCH'));
    const error = await send(server);
    expect((error as TRPCClientError<AnyTRPCRouter>).data).toMatchObject({
      httpStatus: 422,
      idempotencyCode: 'IDEMPOTENCY_KEY_MISMATCH',
    });
    expect(server.attempts).toEqual(['1']);
  });
});

describe('idempotencyLink and an answer without a status', () => {
  /** A terminating link like wsLink: each call answered with the server's error shape, no response. */
  const answeredWith =
    (data: Record<string, unknown>, keys: string[]): TRPCLink<AnyTRPCRouter> =>
    () =>
    ({ op }) =>
      observable((observer) => {
        keys.push((op.input as { idempotencyKey: string }).idempotencyKey);
        observer.error(TRPCClientError.from({ error: { message: 'failed', code: -32603, data } }));
      });

  it('does not send again after an answer naming IDEMPOTENCY_OUTCOME_UNKNOWN without httpStatus', async () => {
    const keys: string[] = [];
    const data = { code: 'INTERNAL_SERVER_ERROR', idempotencyCode: 'IDEMPOTENCY_OUTCOME_UNKNOWN' };
    const client = clientOf({ links: [idempotencyLink({ retry }), answeredWith(data, keys)] });
    const error = await client.pay.mutate({ amount: 5 }).catch((e: unknown) => e);
    expect((error as TRPCClientError<AnyTRPCRouter>).data).toMatchObject(data);
    expect(keys).toHaveLength(1);
  });

  it('sends again, with the same key, after one naming IDEMPOTENCY_KEY_IN_PROGRESS', async () => {
    const keys: string[] = [];
    const data = { code: 'CONFLICT', idempotencyCode: 'IDEMPOTENCY_KEY_IN_PROGRESS', retryAfterMs: 1 };
    const client = clientOf({ links: [idempotencyLink({ retry }), answeredWith(data, keys)] });
    await client.pay.mutate({ amount: 5 }).catch(() => undefined);
    expect(keys).toHaveLength(3);
    expect(new Set(keys).size).toBe(1);
  });
});

describe('idempotencyLink and an answer that is not the server’s', () => {
  const send = async (server: { url: string }, fetch?: FetchFunction) => {
    const client = clientOf({
      links: [idempotencyLink({ retry }), httpLink({ url: server.url, headers: idempotencyHeaders, fetch })],
    });
    await client.pay.mutate({ amount: 5 }).catch(() => undefined);
  };

  it.each([
    [504, 'application/json', '{"message":"Endpoint request timed out"}'],
    [502, 'application/json', '{"message":"Internal server error"}'],
  ])(
    'sends again, with the same key, after a %i %s that is no tRPC answer: the server’s was lost',
    async (status, type, body) => {
      const server = await answering(status, body, { type });
      await send(server);
      expect(server.attempts).toEqual(['1', '2', '3']);
      expect(new Set(server.keys).size).toBe(1);
    },
  );

  it.each([
    [502, '<html><body>502 Bad Gateway</body></html>', ['1']],
    [500, '<html><body>Internal Server Error</body></html>', ['1']],
  ])(
    'sends a %i page once: httpLink hides its status, and a page may stand for any answer, IDEMPOTENCY_OUTCOME_UNKNOWN too',
    async (status, body, attempts) => {
      const server = await answering(status, body, { type: 'text/html' });
      await send(server);
      expect(server.attempts).toEqual(attempts);
    },
  );

  it.each([
    [502, '<html><body>502 Bad Gateway</body></html>', ['1', '2', '3']],
    [504, '<html><body>504 Gateway Time-out</body></html>', ['1', '2', '3']],
    [408, '<html><body>408 Request Timeout</body></html>', ['1', '2', '3']],
    [500, '<html><body>Internal Server Error</body></html>', ['1']],
  ])(
    'with retryingProxyErrors, a proxy’s %i page: sent again with the same key only for 408, 502, 503 and 504',
    async (status, body, attempts) => {
      const server = await answering(status, body, { type: 'text/html' });
      await send(server, retryingProxyErrors());
      expect(server.attempts).toEqual(attempts);
      expect(new Set(server.keys).size).toBe(1);
    },
  );

  it.each([
    [502, 'BAD_GATEWAY'],
    [504, 'GATEWAY_TIMEOUT'],
  ])('does not send again after the server’s own %i (a tRPC error shape)', async (httpStatus, code) => {
    const shape = { error: { message: 'the bank said no', code: -32603, data: { code, httpStatus } } };
    const server = await answering(httpStatus, JSON.stringify(shape));
    await send(server);
    expect(server.attempts).toEqual(['1']);
  });

  it('does not send again after a JSON 500 that is no tRPC answer: its status says not to', async () => {
    const server = await answering(500, '{"message":"Internal server error"}');
    await send(server);
    expect(server.attempts).toEqual(['1']);
  });
});

describe('idempotencyLink and the key on its errors', () => {
  it('puts no key on the error of a call whose key went nowhere: the server may have run it without one', async () => {
    const sent: (string | null)[] = [];
    // A string input (no field for the key) over httpLink without idempotencyHeaders.
    const fetch: FetchFunction = async (_url, init) => {
      sent.push(new Headers(init?.headers).get('idempotency-key'));
      throw new TypeError('fetch failed');
    };
    const client = clientOf({
      links: [idempotencyLink({ retry }), httpLink({ url: 'http://api.invalid/trpc', fetch })],
    });
    const error = await client.pay.mutate('new name').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TRPCClientError);
    expect(sent).toEqual([null]);
    expect((error as TRPCClientError<AnyTRPCRouter>).meta?.idempotencyKey).toBeUndefined();
  });
});
