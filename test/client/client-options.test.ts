import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { httpLink } from '@trpc/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotencyHeaders, idempotencyLink, idempotentFetch } from '../../src/client/index.js';
import { clientOf } from './link-client.js';

const clients = [
  ['idempotencyLink', (options: object) => idempotencyLink(options as never)],
  ['idempotentFetch', (options: object) => idempotentFetch(fetch, options as never)],
] as const;

describe.each(clients)(
  '%s refuses options that cannot work, naming them, when it is built',
  (name, build) => {
    it.each([
      [
        { retry: { attempts: Number.NaN } },
        RangeError,
        'retry.attempts must be an integer ≥ 1, or Infinity, not NaN',
      ],
      [{ retry: { attempts: 0 } }, RangeError, 'retry.attempts must be an integer ≥ 1, or Infinity, not 0'],
      [{ retry: { attempts: 2.5 } }, RangeError, 'retry.attempts must be an integer ≥ 1'],
      [
        { retry: { attempts: '3' } },
        TypeError,
        'retry.attempts must be an integer ≥ 1, or Infinity, not "3"',
      ],
      [
        { retry: { baseDelayMs: Number.NaN } },
        RangeError,
        'retry.baseDelayMs must be a number of milliseconds',
      ],
      [{ retry: { baseDelayMs: -1 } }, RangeError, 'retry.baseDelayMs must be a number of milliseconds ≥ 0'],
      [{ retry: { maxAttempts: 3 } }, TypeError, 'unknown option retry.maxAttempts'],
      [{ retry: 5 }, TypeError, 'retry must be an object'],
      [{ retries: { attempts: 3 } }, TypeError, 'unknown option retries'],
      [{ header: '' }, TypeError, 'header must be a header name, not ""'],
      [{ header: 'Idempotency Key' }, TypeError, 'header must be a header name'],
      [{ header: null }, TypeError, 'header must be a header name, not null'],
      [{ generateKey: 'uuid' }, TypeError, 'generateKey must be a function, not "uuid"'],
      [{ trace: {} }, TypeError, "trace must be @opentelemetry/api's trace"],
    ])('%o', (options, type, message) => {
      expect(() => build(options)).toThrow(type);
      expect(() => build(options)).toThrow(`${name}: ${message}`);
    });

    it('takes every documented option, and undefined for any', () => {
      const retry = { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 };
      const trace = { getActiveSpan: () => undefined };
      expect(() => build({ header: 'X-Key', generateKey: () => 'k', retry, trace })).not.toThrow();
      expect(() =>
        build({ header: undefined, generateKey: undefined, retry: { attempts: undefined } }),
      ).not.toThrow();
      // Attempts without end, no cap on the delay: asked for in so many words.
      expect(() => build({ retry: { attempts: Infinity, maxDelayMs: Infinity } })).not.toThrow();
    });
  },
);

it('idempotencyLink refuses a sendKeyIn or inputField it does not know', () => {
  expect(() => idempotencyLink({ sendKeyIn: 'body' as never })).toThrow(
    "idempotencyLink: sendKeyIn must be one of 'header', 'input', not \"body\"",
  );
  expect(() => idempotencyLink({ inputField: '' })).toThrow(
    'idempotencyLink: inputField must be a non-empty string',
  );
});

describe('a key generateKey makes that is no non-empty string', () => {
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

  it.each([
    [42, 'returned 42'],
    ['', 'returned an empty one'],
  ])('fails the call before anything is sent: %o', async (key, said) => {
    hits = 0;
    const generateKey = () => key as string;
    const client = clientOf({
      links: [idempotencyLink({ generateKey }), httpLink({ url, headers: idempotencyHeaders })],
    });
    await expect(client.pay.mutate({ amount: 5 })).rejects.toThrow(
      `generateKey must return a non-empty string, and ${said}`,
    );
    const send = idempotentFetch(fetch, { generateKey });
    await expect(
      send(url, { method: 'POST', body: JSON.stringify({ query: 'mutation { pay }' }) }),
    ).rejects.toThrow(`generateKey must return a non-empty string, and ${said}`);
    expect(hits).toBe(0);
  });

  it('says to pass generateKey where crypto.randomUUID is missing (plain-http pages, React Native)', async () => {
    const saved = Object.getOwnPropertyDescriptor(globalThis.crypto, 'randomUUID');
    Object.defineProperty(globalThis.crypto, 'randomUUID', { value: undefined, configurable: true });
    try {
      const client = clientOf({ links: [idempotencyLink(), httpLink({ url, headers: idempotencyHeaders })] });
      await expect(client.pay.mutate({ amount: 5 })).rejects.toThrow(
        /crypto.randomUUID .*: pass generateKey/,
      );
      const send = idempotentFetch(fetch);
      await expect(
        send(url, { method: 'POST', body: JSON.stringify({ query: 'mutation { pay }' }) }),
      ).rejects.toThrow(/crypto.randomUUID .*: pass generateKey/);
    } finally {
      if (saved) Object.defineProperty(globalThis.crypto, 'randomUUID', saved);
      else delete (globalThis.crypto as { randomUUID?: unknown }).randomUUID;
    }
  });
});
