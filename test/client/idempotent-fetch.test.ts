import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type FaultProxy, type ProxiedRequest, startFaultProxy } from '../../examples/shared/fault-proxy.js';
import { createOrderServer } from '../../examples/yoga-orders/app.js';
import { type FetchFunction, idempotentFetch, type RetryOptions } from '../../src/client/index.js';
import { listen } from '../envelop/graphql-client.js';
import { paymentsSchema, yogaFor } from '../envelop/payments-yoga.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { badGatewayAfterCommit } from './gateway-error.js';
import { type PaymentsBackend, paymentsBackend } from './payments.js';
import { createPayment } from './samples/graphql-fetch.js';
import { startYogaServer } from './yoga-payments-server.js';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const keyOf = (request: ProxiedRequest) => request.headers['idempotency-key'];
const attemptOf = (request: ProxiedRequest) => request.headers['idempotency-attempt'];
const PAY =
  'mutation Pay($amount: String!) { createPayment(amount: $amount, currency: "EUR") { id amount } }';

interface PaymentResponse {
  data?: { createPayment: { id: number; amount: string } } | null;
  errors?: { message: string; extensions?: { code?: string } }[];
}

/** Through the fault proxy to a Yoga server with the library's `useIdempotency()` plugin. */
describeEachDatabase('idempotentFetch through a fault proxy', (db) => {
  let backend: PaymentsBackend;
  let server: Awaited<ReturnType<typeof startYogaServer>>;
  let proxy: FaultProxy;
  let scope: string;

  beforeAll(async () => {
    backend = paymentsBackend(await connect(db));
    server = await startYogaServer(backend);
  });
  afterAll(async () => {
    await server?.close();
    await backend?.close();
    await backend?.prisma.$disconnect();
  });
  beforeEach(async () => {
    // The proxy fronts Yoga's /graphql; the client sees the same path on the proxy.
    proxy = await startFaultProxy(new URL(server.url).origin);
    scope = uniqueScope();
    Object.assign(backend, { resolverDelayMs: 0, storeUp: true });
  });
  afterEach(async () => {
    await proxy.settled();
    await proxy.close();
  });

  const endpoint = () => `${proxy.url}/graphql`;
  /** One GraphQL POST through `idempotentFetch` with fast retries. */
  const post = async (
    body: unknown,
    {
      headers = {},
      retry = { baseDelayMs: 50, maxDelayMs: 2_000 },
      signal,
    }: Partial<{
      headers: Record<string, string>;
      retry: RetryOptions;
      signal: AbortSignal;
    }> = {},
  ) => {
    const response = await idempotentFetch(fetch, { retry })(endpoint(), {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${scope}`, ...headers },
      body: JSON.stringify(body),
      signal,
    });
    return { status: response.status, json: (await response.json()) as PaymentResponse };
  };
  const pay = (amount = '12.50') => ({ query: PAY, variables: { amount } });

  it('retries a lost response with the same key and gets the original payment, written once', async () => {
    proxy.plan('lose-response');
    const result = await createPayment(endpoint(), scope, '12.50');

    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(result.data?.createPayment).toEqual({
      id: rows[0]!.id,
      amount: '12.5',
      createdAt: rows[0]!.createdAt.toISOString(),
    });
    const [lost, retried] = proxy.requests;
    expect(proxy.requests).toHaveLength(2);
    expect(lost).toMatchObject({ status: 200, delivered: false });
    expect(retried).toMatchObject({ status: 200, delivered: true });
    expect(keyOf(lost!)).toMatch(UUID_V4);
    expect(keyOf(retried!)).toBe(keyOf(lost!));
    expect(retried!.body).toBe(lost!.body);
    // The retry got the stored result of the first attempt, replayed verbatim.
    const replay = JSON.parse(retried!.responseBody!);
    expect(replay.extensions.idempotency).toMatchObject({ key: keyOf(lost!), replayed: true });
    expect(replay.data).toEqual(JSON.parse(lost!.responseBody!).data);
  });

  it('waits out a 409 for the Retry-After it names, then gets the replay of the slow first attempt', async () => {
    backend.resolverDelayMs = 1_500;
    const runsBefore = backend.runs;
    proxy.behave(async (_, index) => {
      if (index === 0) return 'cut-after-request';
      if (index === 1) await backend.whenRuns(runsBefore + 1);
      return 'forward';
    });
    const { status, json } = await post(pay());

    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(status).toBe(200);
    expect(json.data?.createPayment.id).toBe(rows[0]!.id);
    const statuses = proxy.requests.map((r) => r.status);
    expect(statuses[1]).toBe(409);
    expect(statuses.at(-1)).toBe(200);
    const conflict = proxy.requests[1]!;
    expect(conflict.responseHeaders!['retry-after']).toBe('1');
    expect(JSON.parse(conflict.responseBody!).errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_IN_PROGRESS');
    expect(proxy.requests[2]!.at - conflict.at).toBeGreaterThanOrEqual(900);
    expect(new Set(proxy.requests.map(keyOf)).size).toBe(1);
  });

  it('retries a 503 while the store is down and succeeds once it is back, with the same key', async () => {
    await backend.takeStoreDown();
    proxy.behave((_, index) => {
      if (index === 1) backend.storeUp = true;
      return 'forward';
    });
    const { json } = await post(pay());

    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(json.data?.createPayment.id).toBe(rows[0]!.id);
    expect(proxy.requests.map((r) => r.status)).toEqual([503, 200]);
    expect(keyOf(proxy.requests[1]!)).toBe(keyOf(proxy.requests[0]!));
  });

  it('retries a proxy’s 502 page that stood in for the committed answer, and gets the payment, written once', async () => {
    proxy.behave(badGatewayAfterCommit(new URL(server.url).origin));
    const { json } = await post(pay());

    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(json.data?.createPayment.id).toBe(rows[0]!.id);
    expect(proxy.requests.map((r) => r.status)).toEqual([502, 200]);
    expect(keyOf(proxy.requests[1]!)).toBe(keyOf(proxy.requests[0]!));
  });

  it('returns a 422 at once: the same key with another input is never retried', async () => {
    const headers = { 'Idempotency-Key': 'reused-key' };
    await post(pay('10.00'), { headers });
    const { status, json } = await post(pay('99.00'), { headers });

    expect(status).toBe(422);
    expect(json.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_KEY_MISMATCH');
    expect(proxy.requests.map((r) => r.status)).toEqual([200, 422]);
    expect(await backend.paymentsOf(scope)).toHaveLength(1);
  });

  it('gives two logical mutations two keys, and writes two payments', async () => {
    const first = await post(pay());
    const second = await post(pay());

    const keys = proxy.requests.map(keyOf);
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(UUID_V4);
    expect(keys[1]).toMatch(UUID_V4);
    expect(keys[0]).not.toBe(keys[1]);
    expect((await backend.paymentsOf(scope)).map((p) => p.id)).toEqual([
      first.json.data?.createPayment.id,
      second.json.data?.createPayment.id,
    ]);
  });

  it("keeps the caller's own Idempotency-Key header, on every retry", async () => {
    proxy.plan('lose-response', 'drop-request');
    await post(pay(), { headers: { 'idempotency-key': 'order-42' } });

    expect(proxy.requests.map(keyOf)).toEqual(['order-42', 'order-42', 'order-42']);
    // The caller's key may have been sent before: its sends are not numbered.
    expect(proxy.requests.map(attemptOf)).toEqual([undefined, undefined, undefined]);
    expect(await backend.paymentsOf(scope)).toHaveLength(1);
  });

  it('numbers the sends of its own key, 1 then 2, 3…: the retry after a lost response still replays', async () => {
    proxy.plan('lose-response', 'drop-request');
    const result = await post(pay());

    expect(proxy.requests.map(attemptOf)).toEqual(['1', '2', '3']);
    expect(new Set(proxy.requests.map(keyOf)).size).toBe(1);
    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(result.json.data?.createPayment.id).toBe(rows[0]!.id);
  });

  it('retries a Request object the same way, its body sent again', async () => {
    proxy.plan('lose-response');
    const request = new Request(endpoint(), {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${scope}` },
      body: JSON.stringify(pay()),
    });
    const response = await idempotentFetch(fetch, { retry: { baseDelayMs: 50 } })(request);

    const rows = await backend.paymentsOf(scope);
    expect(((await response.json()) as PaymentResponse).data?.createPayment.id).toBe(rows[0]!.id);
    expect(rows).toHaveLength(1);
    expect(proxy.requests).toHaveLength(2);
    expect(keyOf(proxy.requests[1]!)).toBe(keyOf(proxy.requests[0]!));
  });

  it('gives up with the key on its error, and a call again with that key gets the payment, written once', async () => {
    proxy.plan('lose-response', 'drop-request', 'drop-request');
    const error = (await post(pay(), { retry: { attempts: 3, baseDelayMs: 10 } }).catch(
      (e: unknown) => e,
    )) as {
      idempotencyKey?: string;
    };
    expect(error).toBeInstanceOf(TypeError);
    expect(error.idempotencyKey).toBe(keyOf(proxy.requests[0]!));

    const { json } = await post(pay(), { headers: { 'idempotency-key': error.idempotencyKey! } });
    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(json.data?.createPayment.id).toBe(rows[0]!.id);
    expect(new Set(proxy.requests.map(keyOf)).size).toBe(1);
  });

  it('gives up on a key still running with the key on its answer, as the Idempotency-Key header', async () => {
    backend.resolverDelayMs = 1_000;
    const runsBefore = backend.runs;
    proxy.behave(async (_, index) => {
      if (index === 0) return 'cut-after-request';
      await backend.whenRuns(runsBefore + 1); // the retry lands while the key is held
      return 'forward';
    });
    const response = await idempotentFetch(fetch, {
      retry: { attempts: 2, baseDelayMs: 10, maxDelayMs: 10 },
    })(endpoint(), {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${scope}` },
      body: JSON.stringify(pay()),
    });
    expect(response.status).toBe(409);
    expect(response.headers.get('idempotency-key')).toBe(keyOf(proxy.requests[0]!));
  });

  it('stops retrying as soon as the signal aborts, mid-wait', async () => {
    const controller = new AbortController();
    proxy.behave((_, index) => {
      if (index === 0) setTimeout(() => controller.abort(), 100);
      return 'drop-request';
    });
    const error = await post(pay(), {
      retry: { baseDelayMs: 1_000, maxDelayMs: 1_000 },
      signal: controller.signal,
    }).catch((e: unknown) => e);

    // The signal's own reason, untouched: it is the caller's, and may be every aborted call's.
    expect(error).toBe(controller.signal.reason);
    expect((error as { idempotencyKey?: string }).idempotencyKey).toBeUndefined();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(proxy.requests).toHaveLength(1);
  });

  it('passes queries through untouched: no key, no retry', async () => {
    proxy.plan('drop-request');
    await expect(post({ query: '{ paymentCount }' })).rejects.toThrow();
    const { json } = await post({ query: 'query Count { paymentCount }' });

    expect(json).toEqual({ data: { paymentCount: 0 } });
    expect(proxy.requests.map(keyOf)).toEqual([undefined, undefined]);
  });
});

/** Field-level keys, against the Yoga orders example of the README (`@idempotent createOrder`). */
describeEachDatabase('idempotentFetch with field-level keys', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let server: Awaited<ReturnType<typeof listen>>;
  let proxy: FaultProxy;

  beforeAll(async () => {
    prisma = await connect(db);
    server = await listen(createOrderServer(prisma));
  });
  afterAll(async () => {
    await server?.close();
    await prisma?.$disconnect();
  });
  beforeEach(async () => {
    proxy = await startFaultProxy(new URL(server.url).origin);
  });
  afterEach(async () => {
    await proxy.settled();
    await proxy.close();
  });

  it('adds no header to a mutation that passes its own key argument, and retries it with that key', async () => {
    const userId = uniqueScope();
    proxy.plan('lose-response');
    const response = await idempotentFetch(fetch, { retry: { baseDelayMs: 50 } })(`${proxy.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-user-id': userId },
      body: JSON.stringify({
        query: `mutation Order($key: String) {
          createOrder(input: { sku: "book", unitPrice: "9.50" }, idempotencyKey: $key) { id total }
        }`,
        variables: { key: 'order-7' },
      }),
    });
    const { data, extensions } = (await response.json()) as {
      data: { createOrder: { id: number; total: string } };
      extensions: { idempotency: { createOrder: { key: string; replayed: boolean } } };
    };

    const orders = await prisma.order.findMany({ where: { userId } });
    expect(orders.map((o) => o.id)).toEqual([data.createOrder.id]);
    expect(data.createOrder.total).toBe('9.50');
    expect(extensions.idempotency.createOrder).toMatchObject({ key: 'order-7', replayed: true });
    expect(proxy.requests).toHaveLength(2);
    expect(proxy.requests.map(keyOf)).toEqual([undefined, undefined]);
  });

  it('keys a mutation whose key argument is a variable left null with the header, on every attempt', async () => {
    const userId = uniqueScope();
    proxy.plan('lose-response');
    const response = await idempotentFetch(fetch, { retry: { baseDelayMs: 50 } })(`${proxy.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-user-id': userId },
      body: JSON.stringify({
        query: `mutation Order($key: String) {
          createOrder(input: { sku: "book", unitPrice: "9.50" }, idempotencyKey: $key) { id total }
        }`,
        variables: { key: null },
      }),
    });
    const { data } = (await response.json()) as { data: { createOrder: { id: number } } };

    const orders = await prisma.order.findMany({ where: { userId } });
    expect(orders.map((o) => o.id)).toEqual([data.createOrder.id]);
    expect(proxy.requests).toHaveLength(2);
    const [first, retry] = proxy.requests.map(keyOf);
    expect(first).toMatch(UUID_V4);
    expect(retry).toBe(first);
  });
});

describe('idempotentFetch on requests it must leave alone', () => {
  /** A fetch that answers 503 and records what it was given. */
  function recordingFetch() {
    const calls: { input: unknown; init: RequestInit | undefined }[] = [];
    const fetch: FetchFunction = async (input, init) => {
      calls.push({ input, init });
      return new Response('{}', { status: 503 });
    };
    return { calls, fetch };
  }
  const mutation = JSON.stringify({ query: 'mutation { pay }' });

  it.each([
    ['a query', { method: 'POST', body: JSON.stringify({ query: '{ payments }' }) }],
    ['a subscription', { method: 'POST', body: JSON.stringify({ query: 'subscription { paid }' }) }],
    ['a batch (an array of operations)', { method: 'POST', body: `[${mutation}]` }],
    [
      'a persisted query without its text',
      { method: 'POST', body: JSON.stringify({ extensions: { persistedQuery: { sha256Hash: 'abc' } } }) },
    ],
    ['a multipart upload', { method: 'POST', body: new FormData() }],
    ['a body that is not JSON', { method: 'POST', body: 'mutation { pay }' }],
    ['a GET', { method: 'GET' }],
  ] as [string, RequestInit][])('passes %s to fetch once, exactly as given', async (_, init) => {
    const { calls, fetch } = recordingFetch();
    const response = await idempotentFetch(fetch, { retry: { baseDelayMs: 1 } })(
      'http://127.0.0.1:1/graphql',
      init,
    );

    expect(response.status).toBe(503);
    expect(calls).toEqual([{ input: 'http://127.0.0.1:1/graphql', init }]);
  });

  it('passes a Request whose body is not JSON (an upload still streaming) to fetch unread', async () => {
    const { calls, fetch } = recordingFetch();
    const upload = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('--boundary\r\n')); // and the rest never comes
      },
    });
    const request = new Request('http://x/graphql', {
      method: 'POST',
      headers: { 'content-type': 'multipart/form-data; boundary=boundary' },
      body: upload,
      duplex: 'half',
    } as RequestInit);
    const response = await idempotentFetch(fetch, { retry: { baseDelayMs: 1 } })(request);

    expect(response.status).toBe(503);
    expect(calls).toEqual([{ input: request, init: undefined }]);
    expect(request.bodyUsed).toBe(false);
  });

  it('reads a mutation sent as bytes, and sends the same text on every attempt', async () => {
    const { calls, fetch } = recordingFetch();
    const init = { method: 'POST', body: new TextEncoder().encode(mutation) };
    const response = await idempotentFetch(fetch, { retry: { attempts: 3, baseDelayMs: 1 } })(
      'http://x/graphql',
      init,
    );

    expect(response.status).toBe(503);
    expect(calls.map((c) => c.init?.body)).toEqual([mutation, mutation, mutation]);
    const keys = calls.map((c) => new Headers(c.init?.headers).get('idempotency-key'));
    expect(keys[0]).toMatch(UUID_V4);
    expect(new Set(keys).size).toBe(1);
    const attempts = calls.map((c) => new Headers(c.init?.headers).get('idempotency-attempt'));
    expect(attempts).toEqual(['1', '2', '3']);
  });

  it("sends a Blob body's type as the Content-Type of every attempt, leaving the caller's headers alone", async () => {
    const { calls, fetch } = recordingFetch();
    const headers = { authorization: 'Bearer t' };
    const body = new Blob([mutation], { type: 'application/json' });
    await idempotentFetch(fetch, { retry: { attempts: 2, baseDelayMs: 1 } })('http://x/graphql', {
      method: 'POST',
      headers,
      body,
    });

    const types = calls.map((c) => new Request('http://x/', c.init).headers.get('content-type'));
    expect(types).toEqual(['application/json', 'application/json']);
    expect(headers).toEqual({ authorization: 'Bearer t' });
  });

  it('numbers no sends of a mutation that passes its own key arguments', async () => {
    const { calls, fetch } = recordingFetch();
    const keyed = JSON.stringify({ query: 'mutation { pay(idempotencyKey: "k-1") }' });
    await idempotentFetch(fetch, { retry: { attempts: 2, baseDelayMs: 1 } })('http://x/graphql', {
      method: 'POST',
      body: keyed,
    });

    const headers = calls.map((c) => new Headers(c.init?.headers));
    expect(headers.map((h) => [h.has('idempotency-key'), h.get('idempotency-attempt')])).toEqual([
      [false, null],
      [false, null],
    ]);
  });

  it('uses the header name and key generator it is given', async () => {
    const { calls, fetch } = recordingFetch();
    await idempotentFetch(fetch, {
      header: 'X-Request-Key',
      generateKey: () => 'k-1',
      retry: { attempts: 1 },
    })('http://x/graphql', { method: 'POST', body: mutation });

    expect(new Headers(calls[0]!.init?.headers).get('x-request-key')).toBe('k-1');
    expect(new Headers(calls[0]!.init?.headers).has('idempotency-key')).toBe(false);
  });
});

/** Only operations whose every root field a key covers are retried. */
describe('idempotentFetch answers', () => {
  it.each([204, 205])(
    'puts the key on a %i answer to a keyed mutation, which has no body to read',
    async (status) => {
      const keys: (string | undefined)[] = [];
      const server = createServer((request, response) => {
        keys.push(request.headers['idempotency-key'] as string | undefined);
        request.resume().on('end', () => response.writeHead(status).end());
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const { port } = server.address() as AddressInfo;
        const response = await idempotentFetch(fetch)(`http://127.0.0.1:${port}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ query: 'mutation { pay }' }),
        });

        expect(response.status).toBe(status);
        expect(response.body).toBeNull();
        expect(keys).toHaveLength(1);
        expect(response.headers.get('idempotency-key')).toBe(keys[0]);
      } finally {
        server.close();
      }
    },
  );
});

describe('idempotentFetch and mutations not covered by keys', () => {
  let server: Awaited<ReturnType<typeof listen>>;
  let proxy: FaultProxy;
  const notes = { notify: 0 };
  let payments: { pay: number };

  beforeAll(async () => {
    const { schema, calls } = paymentsSchema(
      /* GraphQL */ `
        input NoteInput {
          to: String!
          idempotencyKey: String
        }
        type Mutation {
          pay(amount: Int!, idempotencyKey: String): Int!
          notify(to: String, input: NoteInput): Boolean!
        }
      `,
      {
        Mutation: {
          notify: () => {
            notes.notify++;
            return true;
          },
        },
      },
    );
    payments = calls;
    server = await listen(yogaFor(schema).yoga);
  });
  afterAll(() => server?.close());
  beforeEach(async () => {
    proxy = await startFaultProxy(new URL(server.url).origin);
  });
  afterEach(async () => {
    await proxy.settled();
    await proxy.close();
  });

  const post = (query: string) =>
    idempotentFetch(fetch, { retry: { baseDelayMs: 50 } })(`${proxy.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-user-id': 'user-1' },
      body: JSON.stringify({ query }),
    });

  it('sends a mutation with a keyed and an unkeyed root field once: after a lost response, notify ran once', async () => {
    const before = { pay: payments.pay, notify: notes.notify };
    proxy.plan('lose-response');
    const error = await post('mutation { pay(amount: 5, idempotencyKey: "k") notify(to: "bob") }').catch(
      (e: unknown) => e,
    );

    expect(error).toBeInstanceOf(Error);
    expect(proxy.requests).toHaveLength(1);
    expect(proxy.requests[0]!.headers['idempotency-key']).toBeUndefined();
    expect([payments.pay - before.pay, notes.notify - before.notify]).toEqual([1, 1]);
  });

  it('keys a mutation whose only idempotencyKey is an input field with the header, and its retry replays', async () => {
    const before = notes.notify;
    proxy.plan('lose-response');
    const response = await post('mutation { notify(input: { to: "bob", idempotencyKey: "x" }) }');

    expect(((await response.json()) as { data: unknown }).data).toEqual({ notify: true });
    expect(proxy.requests).toHaveLength(2);
    const keys = proxy.requests.map((r) => r.headers['idempotency-key']);
    expect(keys[0]).toMatch(UUID_V4);
    expect(keys[1]).toBe(keys[0]);
    expect(notes.notify - before).toBe(1);
  });
});

describe('idempotentFetch and answers lost on the way', () => {
  const mutation = JSON.stringify({ query: 'mutation { pay }' });
  const fast = { attempts: 3, baseDelayMs: 1, maxDelayMs: 5 };

  /** A fetch that fails its first `failures` sends with `error()`, then answers 200. */
  function failingFetch(failures: number, error: () => unknown) {
    const sends: Headers[] = [];
    const fetch: FetchFunction = async (_input, init) => {
      sends.push(new Headers(init?.headers));
      if (sends.length <= failures) throw error();
      return new Response('{"data":{"pay":1}}', { status: 200 });
    };
    return { sends, fetch };
  }

  it('retries an attempt that timed out inside fetch (AbortSignal.timeout), with the same key', async () => {
    const { sends, fetch } = failingFetch(1, () => new DOMException('timed out', 'TimeoutError'));
    const response = await idempotentFetch(fetch, { retry: fast })('http://x/graphql', {
      method: 'POST',
      body: mutation,
    });
    expect(await response.json()).toEqual({ data: { pay: 1 } });
    expect(sends.map((headers) => headers.get('idempotency-attempt'))).toEqual(['1', '2']);
    expect(sends[1]!.get('idempotency-key')).toBe(sends[0]!.get('idempotency-key'));
  });

  /** A fetch answering `first` to the first send, 200 to the next. */
  function answeringFirst(first: Response) {
    const answers = [first, new Response('{"data":{"pay":1}}', { status: 200 })];
    const sends: Headers[] = [];
    const fetch: FetchFunction = async (_input, init) => {
      sends.push(new Headers(init?.headers));
      return answers.shift()!;
    };
    return { sends, fetch };
  }

  it.each([
    [408, 'text/html', '<html>408 Request Timeout</html>'],
    [502, 'text/html', '<html>502 Bad Gateway</html>'],
    [503, 'text/html', '<html>503 Service Unavailable</html>'],
    [504, 'application/json', '{"message":"Endpoint request timed out"}'],
  ])(
    'retries a proxy’s %i (no GraphQL response: the server’s answer was lost) with the same key',
    async (status, type, body) => {
      const { sends, fetch } = answeringFirst(
        new Response(body, { status, headers: { 'content-type': type } }),
      );
      const response = await idempotentFetch(fetch, { retry: fast })('http://x/graphql', {
        method: 'POST',
        body: mutation,
      });
      expect(await response.json()).toEqual({ data: { pay: 1 } });
      expect(sends).toHaveLength(2);
      expect(sends[1]!.get('idempotency-key')).toBe(sends[0]!.get('idempotency-key'));
    },
  );

  it.each([
    [500, '<html>500 Internal Server Error</html>'],
    [502, JSON.stringify({ errors: [{ message: 'bank down', extensions: { code: 'BAD_GATEWAY' } }] })],
    [504, JSON.stringify({ errors: [{ message: 'bank slow', extensions: { code: 'GATEWAY_TIMEOUT' } }] })],
  ])(
    'returns a %i that another attempt would not change at once (a 500 page, the server’s own 502 or 504)',
    async (status, body) => {
      const { sends, fetch } = answeringFirst(new Response(body, { status }));
      const response = await idempotentFetch(fetch, { retry: fast })('http://x/graphql', {
        method: 'POST',
        body: mutation,
      });
      expect(response.status).toBe(status);
      expect(sends).toHaveLength(1);
    },
  );

  it('does not retry an abort from inside fetch, nor one of the call’s own signal timing out', async () => {
    const aborted = failingFetch(1, () => new DOMException('aborted', 'AbortError'));
    const abort = idempotentFetch(aborted.fetch, { retry: fast })('http://x/graphql', {
      method: 'POST',
      body: mutation,
    });
    await expect(abort).rejects.toMatchObject({ name: 'AbortError' });
    expect(aborted.sends).toHaveLength(1);
    const signal = AbortSignal.abort(new DOMException('timed out', 'TimeoutError'));
    const timedOut = failingFetch(1, () => signal.reason);
    const call = idempotentFetch(timedOut.fetch, { retry: fast })('http://x/graphql', {
      method: 'POST',
      body: mutation,
      signal,
    });
    await expect(call).rejects.toMatchObject({ name: 'TimeoutError' });
    expect(timedOut.sends).toHaveLength(1);
  });

  it('returns an answer delivered in parts (multipart, event stream) as it comes, unread', async () => {
    for (const type of ['multipart/mixed; boundary="-"', 'text/event-stream']) {
      // A body whose first part came and whose end has not.
      const fetch: FetchFunction = async () =>
        new Response(
          new ReadableStream({
            start: (controller) => controller.enqueue(new TextEncoder().encode('first part')),
          }),
          { status: 200, headers: { 'content-type': type } },
        );
      const response = await idempotentFetch(fetch, { retry: fast })('http://x/graphql', {
        method: 'POST',
        body: mutation,
      });
      const { value } = await response.body!.getReader().read();
      expect(new TextDecoder().decode(value)).toBe('first part');
    }
  });

  it('retries an answer whose body was cut off, with the same key, and returns the whole replay', async () => {
    const body = JSON.stringify({ data: { pay: { id: 1, padding: 'x'.repeat(2_000) } } });
    const sends: { key: string | undefined; attempt: string | undefined }[] = [];
    const server = createServer((request, response) => {
      sends.push({
        key: request.headers['idempotency-key'] as string | undefined,
        attempt: request.headers['idempotency-attempt'] as string | undefined,
      });
      request.resume();
      request.on('end', () => {
        response.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
        if (sends.length > 1) return void response.end(body);
        // The first answer loses its connection halfway through its body.
        response.write(body.slice(0, 100));
        setTimeout(() => response.socket?.destroy(), 20);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const response = await idempotentFetch(fetch, { retry: fast })(`http://127.0.0.1:${port}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: mutation,
      });
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe('application/json');
      expect(response.url).toBe(`http://127.0.0.1:${port}/graphql`);
      expect(await response.json()).toEqual(JSON.parse(body));
      expect(sends.map(({ attempt }) => attempt)).toEqual(['1', '2']);
      expect(sends[1]!.key).toBe(sends[0]!.key);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
