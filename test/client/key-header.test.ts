import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createTRPCClient, httpLink, TRPCClientError } from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotencyHeaders, idempotencyLink, idempotentFetch } from '../../src/client/index.js';
import { keyHeaderValue, UnsendableKeyError } from '../../src/client/key-header.js';
import { parseKeyHeader } from '../../src/core/key.js';

describe('the Idempotency-Key header the clients send', () => {
  it('is read back by the server as the very key, for any key the server accepts (property)', () => {
    const visibleAscii = fc.string({
      unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
      minLength: 1,
      maxLength: 255,
    });
    fc.assert(
      fc.property(visibleAscii, (key) => {
        expect(parseKeyHeader(keyHeaderValue(key))).toBe(key);
      }),
      { numRuns: 2_000 },
    );
  });

  it('stays bare for the usual keys, and quotes one with a comma or a leading quote', () => {
    const uuid = '8e03978e-40d5-43e8-bc93-6894a57f9324';
    expect(keyHeaderValue(uuid)).toBe(uuid);
    expect(idempotencyHeaders({ op: { context: { idempotencyKey: 'order,42' } } })).toEqual({
      'Idempotency-Key': '"order,42"',
    });
    expect(keyHeaderValue('"quoted"')).toBe('"\\"quoted\\""');
  });
});

describe('a key no header can carry', () => {
  it.each(['a\nb', 'tab\tin', ' leading', 'trailing ', 'emoji-😀', 'has,comma-ü', '"quoted-ü'])(
    'is refused, saying so: %j',
    (key) => {
      expect(() => keyHeaderValue(key)).toThrow(UnsendableKeyError);
      expect(() => keyHeaderValue(key)).toThrow(
        `The idempotency key ${JSON.stringify(key)} cannot be sent as a header`,
      );
    },
  );

  it('is told from one a header carries as it is, past ASCII too (Latin-1)', () => {
    expect(keyHeaderValue('clé-ü')).toBe('clé-ü');
    expect(keyHeaderValue('in side')).toBe('in side');
    expect(() => new Headers({ 'idempotency-key': keyHeaderValue('clé-ü') })).not.toThrow();
  });
});

describe('the clients and a key no header can carry', () => {
  let url = '';
  let hits = 0;
  const server = createServer((request, response) => {
    hits++;
    request.resume();
    request.on('end', () =>
      response.writeHead(200, { 'content-type': 'application/json' }).end('{"result":{"data":1}}'),
    );
  });
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((resolve) => server.close(resolve)));
  const retry = { attempts: 3, baseDelayMs: 1, maxDelayMs: 5 };

  it.each(['a\nb', 'has,comma-ü'])(
    'idempotencyLink fails the call at once, unsent and not retried: %j',
    async (key) => {
      hits = 0;
      let writes = 0;
      const client = createTRPCClient<AnyTRPCRouter>({
        links: [
          idempotencyLink({ retry }),
          httpLink({
            url,
            headers: ({ op }) => {
              writes++;
              return idempotencyHeaders({ op });
            },
          }),
        ],
      }) as unknown as { pay: { mutate(input: unknown, options: object): Promise<unknown> } };
      const error = await client.pay
        .mutate({ amount: 5 }, { context: { idempotencyKey: key } })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TRPCClientError);
      expect((error as Error).message).toContain(
        `The idempotency key ${JSON.stringify(key)} cannot be sent as a header`,
      );
      expect(writes).toBe(1);
      expect(hits).toBe(0);
    },
  );

  it('idempotentFetch fails the call at once, unsent, for a generated key', async () => {
    hits = 0;
    const send = idempotentFetch(fetch, { retry, generateKey: () => 'a\nb' });
    await expect(
      send(url, { method: 'POST', body: JSON.stringify({ query: 'mutation { pay }' }) }),
    ).rejects.toThrow('The idempotency key "a\\nb" cannot be sent as a header');
    expect(hits).toBe(0);
  });
});
