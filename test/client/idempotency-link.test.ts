import {
  createTRPCClient,
  httpBatchLink,
  httpBatchStreamLink,
  httpLink,
  retryLink,
  TRPCClientError,
  type TRPCLink,
} from '@trpc/client';
import { type AnyTRPCRouter, initTRPC, TRPCError } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { observable } from '@trpc/server/observable';
import superjson from 'superjson';
import { afterAll, afterEach, beforeAll, beforeEach, expect, it } from 'vitest';
import { z } from 'zod';
import { type FaultProxy, type ProxiedRequest, startFaultProxy } from '../../examples/shared/fault-proxy.js';
import {
  type IdempotencyLinkOptions,
  idempotencyHeaders,
  idempotencyLink,
  retryingProxyErrors,
} from '../../src/client/index.js';
import { memoryStore } from '../../src/index.js';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { badGatewayAfterCommit } from './gateway-error.js';
import { type PaymentsBackend, paymentsBackend } from './payments.js';
import { createBatchClient, createClient } from './samples/trpc-client.js';
import { type PaymentsRouter, startTrpcServer } from './trpc-payments-server.js';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const keyOf = (request: ProxiedRequest) => request.headers['idempotency-key'];
const attemptOf = (request: ProxiedRequest) => request.headers['idempotency-attempt'];
/** The `idempotencyKey` input fields of a (batched) tRPC request body. */
const inputKeysOf = (request: ProxiedRequest): string[] =>
  Object.values(JSON.parse(request.body) as Record<string, { json: { idempotencyKey?: string } }>).map(
    (input) => input.json.idempotencyKey ?? '',
  );

/** Through the fault proxy to a standalone tRPC server with the library's `idempotency()` middleware. */
describeEachDatabase('idempotencyLink through a fault proxy', (db) => {
  let backend: PaymentsBackend;
  let server: Awaited<ReturnType<typeof startTrpcServer>>;
  let proxy: FaultProxy;
  let scope: string;

  beforeAll(async () => {
    backend = paymentsBackend(await connect(db));
    server = await startTrpcServer(backend);
  });
  afterAll(async () => {
    await server?.close();
    await backend?.close();
    await backend?.prisma.$disconnect();
  });
  beforeEach(async () => {
    proxy = await startFaultProxy(server.url);
    scope = uniqueScope();
    Object.assign(backend, { resolverDelayMs: 0, storeUp: true });
  });
  afterEach(async () => {
    await proxy.settled();
    await proxy.close();
  });

  /** A client with fast retries, so failing tests fail fast. */
  const client = (retry: IdempotencyLinkOptions['retry'] = { baseDelayMs: 50, maxDelayMs: 2_000 }) =>
    createTRPCClient<PaymentsRouter>({
      links: [
        idempotencyLink({ retry }),
        httpLink({
          url: proxy.url,
          transformer: superjson,
          headers: ({ op }) => ({ ...idempotencyHeaders({ op }), authorization: `Bearer ${scope}` }),
          fetch: retryingProxyErrors(),
        }),
      ],
    });
  const pay = { amount: '12.50', currency: 'EUR' };

  it('retries a lost response with the same key and gets the original payment, written once', async () => {
    proxy.plan('lose-response');
    const payment = await createClient(proxy.url, scope).createPayment.mutate(pay);

    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(payment).toEqual({
      id: rows[0]!.id,
      amount: '12.5',
      currency: 'EUR',
      createdAt: rows[0]!.createdAt,
    });
    expect(payment.createdAt).toBeInstanceOf(Date);
    expect(backend.runs).toBeGreaterThanOrEqual(1);
    const [lost, retried] = proxy.requests;
    expect(proxy.requests).toHaveLength(2);
    expect(lost).toMatchObject({ status: 200, delivered: false });
    expect(retried).toMatchObject({ status: 200, delivered: true });
    expect(retried!.responseHeaders!['idempotent-replayed']).toBe('true');
    expect(keyOf(lost!)).toMatch(UUID_V4);
    expect(keyOf(retried!)).toBe(keyOf(lost!));
  });

  it('waits out a 409 for the Retry-After it names, then gets the replay of the slow first attempt', async () => {
    backend.resolverDelayMs = 1_500;
    const runsBefore = backend.runs;
    proxy.behave(async (_, index) => {
      if (index === 0) return 'cut-after-request'; // the client gives up; the server keeps going
      if (index === 1) await backend.whenRuns(runsBefore + 1); // the retry lands while the key is held
      return 'forward';
    });
    const payment = await client().createPayment.mutate(pay);

    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(payment.id).toBe(rows[0]!.id);
    const statuses = proxy.requests.map((r) => r.status);
    expect(statuses[1]).toBe(409);
    expect(statuses.at(-1)).toBe(200);
    const conflict = proxy.requests[1]!;
    expect(conflict.responseHeaders!['retry-after']).toBe('1');
    expect(conflict.responseBody).toContain('"idempotencyCode":"IDEMPOTENCY_KEY_IN_PROGRESS"');
    expect(proxy.requests[2]!.at - conflict.at).toBeGreaterThanOrEqual(900);
    expect(new Set(proxy.requests.map(keyOf)).size).toBe(1);
  });

  it('retries a 503 while the store is down and succeeds once it is back, with the same key', async () => {
    await backend.takeStoreDown();
    proxy.behave((_, index) => {
      if (index === 1) backend.storeUp = true;
      return 'forward';
    });
    const payment = await client().createPayment.mutate(pay);

    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(payment.id).toBe(rows[0]!.id);
    expect(proxy.requests.map((r) => r.status)).toEqual([503, 200]);
    expect(keyOf(proxy.requests[1]!)).toBe(keyOf(proxy.requests[0]!));
  });

  it('retries a proxy’s 502 page that stood in for the committed answer, and gets the payment, written once', async () => {
    proxy.behave(badGatewayAfterCommit(server.url));
    const payment = await client().createPayment.mutate(pay);

    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(payment.id).toBe(rows[0]!.id);
    expect(proxy.requests.map((r) => r.status)).toEqual([502, 200]);
    expect(keyOf(proxy.requests[1]!)).toBe(keyOf(proxy.requests[0]!));
  });

  it('returns a 422 at once: the same key with another input is never retried', async () => {
    const trpc = client();
    await trpc.createPayment.mutate(pay, { context: { idempotencyKey: 'reused-key' } });
    const error = await trpc.createPayment
      .mutate({ ...pay, amount: '99.00' }, { context: { idempotencyKey: 'reused-key' } })
      .catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    expect((error as TRPCClientError<PaymentsRouter>).data?.httpStatus).toBe(422);
    expect((error as TRPCClientError<PaymentsRouter>).data?.code).toBe('UNPROCESSABLE_CONTENT');
    expect((error as TRPCClientError<PaymentsRouter>).data?.idempotencyCode).toBe('IDEMPOTENCY_KEY_MISMATCH');
    expect(proxy.requests.map((r) => r.status)).toEqual([200, 422]);
    expect(await backend.paymentsOf(scope)).toHaveLength(1);
  });

  it('returns a 400 at once: a malformed key is never retried', async () => {
    const error = await client()
      .createPayment.mutate(pay, { context: { idempotencyKey: 'not a valid key' } })
      .catch((e: unknown) => e);

    expect((error as TRPCClientError<PaymentsRouter>).data?.httpStatus).toBe(400);
    expect((error as TRPCClientError<PaymentsRouter>).data?.idempotencyCode).toBe('IDEMPOTENCY_KEY_INVALID');
    expect(proxy.requests.map((r) => r.status)).toEqual([400]);
    expect(await backend.paymentsOf(scope)).toHaveLength(0);
  });

  it('gives two logical mutations two keys, and writes two payments', async () => {
    const trpc = client();
    const first = await trpc.createPayment.mutate(pay);
    const second = await trpc.createPayment.mutate(pay);

    const keys = proxy.requests.map(keyOf);
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(UUID_V4);
    expect(keys[1]).toMatch(UUID_V4);
    expect(keys[0]).not.toBe(keys[1]);
    expect((await backend.paymentsOf(scope)).map((p) => p.id)).toEqual([first.id, second.id]);
  });

  it("sends the caller's context.idempotencyKey instead of its own, on every retry", async () => {
    proxy.plan('lose-response', 'drop-request');
    await client().createPayment.mutate(pay, { context: { idempotencyKey: 'order-42' } });

    expect(proxy.requests.map(keyOf)).toEqual(['order-42', 'order-42', 'order-42']);
    // The caller's key may have been sent before: its sends are not numbered.
    expect(proxy.requests.map(attemptOf)).toEqual([undefined, undefined, undefined]);
    expect(await backend.paymentsOf(scope)).toHaveLength(1);
  });

  it('numbers the sends of its own key through idempotencyHeaders, 1 then 2, 3…', async () => {
    proxy.plan('lose-response', 'drop-request');
    const payment = await client().createPayment.mutate(pay);

    expect(proxy.requests.map(attemptOf)).toEqual(['1', '2', '3']);
    expect(new Set(proxy.requests.map(keyOf)).size).toBe(1);
    expect((await backend.paymentsOf(scope)).map((p) => p.id)).toEqual([payment.id]);
  });

  /** A link of the caller's that adds to the context, copying the operation on each send. */
  const addTenant: TRPCLink<PaymentsRouter> =
    () =>
    ({ op, next }) =>
      next({ ...op, context: { ...op.context, tenant: 'acme' } });

  it.each([
    ['placed right before it', []],
    ['with a link between them that copies the operation', [addTenant]],
  ])("keeps the key when tRPC's retryLink, %s, sends the call again", async (_, between) => {
    proxy.plan('lose-response');
    const trpc = createTRPCClient<PaymentsRouter>({
      links: [
        retryLink({ retry: ({ attempts }) => attempts < 3 }),
        ...between,
        idempotencyLink({ retry: { attempts: 1 } }),
        httpLink({
          url: proxy.url,
          transformer: superjson,
          headers: ({ op }) => ({ ...idempotencyHeaders({ op }), authorization: `Bearer ${scope}` }),
        }),
      ],
    });
    const payment = await trpc.createPayment.mutate(pay);

    expect(proxy.requests).toHaveLength(2);
    expect(keyOf(proxy.requests[1]!)).toBe(keyOf(proxy.requests[0]!));
    expect(proxy.requests.map(attemptOf)).toEqual(['1', '2']);
    expect((await backend.paymentsOf(scope)).map((p) => p.id)).toEqual([payment.id]);
  });

  it('gives up after `attempts` and returns the last error', async () => {
    proxy.behave(() => 'drop-request');
    const error = await client({ attempts: 3, baseDelayMs: 10 })
      .createPayment.mutate(pay)
      .catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    expect(proxy.requests).toHaveLength(3);
  });

  it('gives up with the key on its error, and a call again with that key gets the payment, written once', async () => {
    proxy.plan('lose-response', 'drop-request', 'drop-request');
    const trpc = client({ attempts: 3, baseDelayMs: 10 });
    const error = (await trpc.createPayment
      .mutate(pay)
      .catch((e: unknown) => e)) as TRPCClientError<PaymentsRouter>;
    expect(error).toBeInstanceOf(TRPCClientError);
    expect(error.meta?.idempotencyKey).toBe(keyOf(proxy.requests[0]!));

    const payment = await trpc.createPayment.mutate(pay, {
      context: { idempotencyKey: error.meta?.idempotencyKey },
    });
    const rows = await backend.paymentsOf(scope);
    expect(rows).toHaveLength(1);
    expect(payment.id).toBe(rows[0]!.id);
    expect(new Set(proxy.requests.map(keyOf)).size).toBe(1);
  });

  it('stops retrying as soon as the signal aborts, mid-wait', async () => {
    const controller = new AbortController();
    proxy.behave((_, index) => {
      if (index === 0) setTimeout(() => controller.abort(), 100);
      return 'drop-request';
    });
    const error = await client({ baseDelayMs: 1_000, maxDelayMs: 1_000 })
      .createPayment.mutate(pay, { signal: controller.signal })
      .catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    expect((error as TRPCClientError<PaymentsRouter>).cause?.name).toBe('AbortError');
    expect((error as TRPCClientError<PaymentsRouter>).meta?.idempotencyKey).toBe(keyOf(proxy.requests[0]!));
    // Well past the moment a retry would have been sent:
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(proxy.requests).toHaveLength(1);
  });

  it('passes queries through without a key and without retrying them', async () => {
    const trpc = client();
    proxy.plan('drop-request');
    await expect(trpc.paymentCount.query()).rejects.toBeInstanceOf(TRPCClientError);
    expect(await trpc.paymentCount.query()).toBe(0);

    expect(proxy.requests).toHaveLength(2);
    expect(proxy.requests.map(keyOf)).toEqual([undefined, undefined]);
    expect(proxy.requests.map((r) => r.method)).toEqual(['GET', 'GET']);
  });

  it('with httpBatchLink sends each key in its input, and retries a lost batch per call', async () => {
    proxy.plan('lose-response');
    const trpc = createBatchClient(proxy.url, scope);
    const [a, b] = await Promise.all([
      trpc.createPayment.mutate({ ...pay, amount: '1.00' }),
      trpc.createPayment.mutate({ ...pay, amount: '2.00' }),
    ]);

    // The calls of a batch run concurrently on the server: rows may come in either order.
    const rows = (await backend.paymentsOf(scope)).map((p) => [p.id, p.amount.toString()]);
    expect(rows.sort((x, y) => Number(x[1]) - Number(y[1]))).toEqual([
      [a.id, '1'],
      [b.id, '2'],
    ]);
    const [batch, ...retries] = proxy.requests;
    expect(batch!.delivered).toBe(false);
    const keys = inputKeysOf(batch!);
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(UUID_V4);
    expect(keys[1]).toMatch(UUID_V4);
    expect(keys[0]).not.toBe(keys[1]);
    expect(retries.flatMap(inputKeysOf).sort()).toEqual([...keys].sort());
    expect(proxy.requests.map(keyOf)).toEqual(proxy.requests.map(() => undefined));
    // One header for the batch: the highest attempt among its calls.
    expect(proxy.requests.map(attemptOf)).toEqual(['1', ...retries.map(() => '2')]);
  });

  it('in front of a plain httpBatchLink keys a mutation without input by its input, on every retry', async () => {
    proxy.plan('lose-response');
    const trpc = createBatchClient(proxy.url, scope);
    const first = await trpc.payFee.mutate();

    expect((await backend.paymentsOf(scope)).map((p) => p.id)).toEqual([first.id]);
    const keys = proxy.requests.flatMap(inputKeysOf);
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(UUID_V4);
    expect(keys[1]).toBe(keys[0]);
  });

  it('sends the key in the input and as the header through an httpLink with idempotencyHeaders', async () => {
    await client().createPayment.mutate(pay);
    const [request] = proxy.requests;
    expect(inputKeysOf({ ...request!, body: `{"0":${request!.body}}` })).toEqual([keyOf(request!)]);
  });

  it("with sendKeyIn: 'header' retries a call whose key the caller put in its input, behind httpBatchLink", async () => {
    proxy.plan('lose-response');
    const trpc = createTRPCClient<PaymentsRouter>({
      links: [
        idempotencyLink({ sendKeyIn: 'header', retry: { baseDelayMs: 50 } }),
        httpBatchLink({
          url: proxy.url,
          transformer: superjson,
          headers: { authorization: `Bearer ${scope}` },
        }),
      ],
    });
    const keyedPay = { ...pay, idempotencyKey: 'order-7' };
    const payment = await trpc.createPayment.mutate(keyedPay);

    expect(proxy.requests.flatMap(inputKeysOf)).toEqual(['order-7', 'order-7']);
    expect((await backend.paymentsOf(scope)).map((p) => p.id)).toEqual([payment.id]);
  });

  it("with sendKeyIn: 'header' in front of a link that does not send it, says the key was never sent", async () => {
    const trpc = createTRPCClient<PaymentsRouter>({
      links: [
        idempotencyLink({ sendKeyIn: 'header' }),
        httpBatchLink({
          url: proxy.url,
          transformer: superjson,
          headers: { authorization: `Bearer ${scope}` },
        }),
      ],
    });
    const error = await trpc.createPayment.mutate(pay).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    const { message, data } = error as TRPCClientError<PaymentsRouter>;
    expect(message).toMatch(
      /^idempotencyLink gave this mutation the key "[0-9a-f-]{36}", but it was never sent/,
    );
    expect(message).toContain('httpLink({ headers: idempotencyHeaders })');
    expect(data?.idempotencyCode).toBe('IDEMPOTENCY_KEY_MISSING');
    expect(proxy.requests).toHaveLength(1);
    expect(await backend.paymentsOf(scope)).toHaveLength(0);
  });
});

/** `fetch` answered by `router`, its context Alice's. */
function fetchOf(router: AnyTRPCRouter) {
  return (url: RequestInfo | URL, init?: RequestInit) =>
    fetchRequestHandler({
      endpoint: '/trpc',
      req: new Request(url, init),
      router,
      createContext: () => ({ userId: 'alice' }),
    });
}

/**
 * A server of one `pay` mutation over `fetch` behind an API gateway that answers its JSON 504 (not
 * tRPC's shape) in place of the first `lost` answers, after the server committed.
 */
function gatewayServer(lost: number) {
  const counts = { runs: 0, sends: 0 };
  const t = initTRPC.context<{ userId: string }>().create({ errorFormatter: idempotencyErrorFormatter });
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number() }))
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.userId }))
      .mutation(() => ({ id: ++counts.runs })),
  });
  const server = fetchOf(router);
  const fetch = async (url: RequestInfo | URL, init?: RequestInit) => {
    const answer = await server(url, init);
    if (++counts.sends > lost) return answer;
    await answer.text(); // committed; the gateway stopped waiting in front of it
    return Response.json({ message: 'Endpoint request timed out' }, { status: 504 });
  };
  const client = createTRPCClient<typeof router>({
    links: [
      idempotencyLink({ retry: { attempts: 3, baseDelayMs: 1 } }),
      httpBatchStreamLink({ url: 'http://server/trpc', fetch, headers: idempotencyHeaders }),
    ],
  });
  return { client, counts };
}

it('retries behind httpBatchStreamLink a gateway’s JSON 504, which that link ends without an answer', async () => {
  const { client, counts } = gatewayServer(1);
  expect(await client.pay.mutate({ amount: 5 })).toEqual({ id: 1 });
  expect(counts).toEqual({ runs: 1, sends: 2 });
});

it('gives up behind httpBatchStreamLink on answers lost every time with the key on its error', async () => {
  const { client, counts } = gatewayServer(3);
  const error = (await client.pay
    .mutate({ amount: 5 })
    .catch((e: unknown) => e)) as TRPCClientError<AnyTRPCRouter>;
  expect(error).toBeInstanceOf(TRPCClientError);
  expect(error.message).toMatch(/lost on the way/);
  expect(error.meta?.idempotencyKey).toEqual(expect.any(String));
  expect(counts).toEqual({ runs: 1, sends: 3 });
});

/** A server whose `archive` mutation takes a string input, which cannot carry a key, over `fetch`. */
function archiveServer(required: boolean) {
  const counts = { runs: 0 };
  const t = initTRPC.context<{ userId: string }>().create();
  const router = t.router({
    archive: t.procedure
      .input(z.string())
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.userId, required }))
      .mutation(({ input }) => {
        counts.runs++;
        return { archived: input };
      }),
  });
  const fetch = fetchOf(router);
  return { router, fetch, counts };
}

it('does not retry a mutation whose key went nowhere: the server may have run it unkeyed', async () => {
  const server = archiveServer(false);
  let sends = 0;
  // The server runs the call, then its answer is lost (a dropped connection).
  const losingFirstAnswer = async (url: RequestInfo | URL, init?: RequestInit) => {
    sends++;
    const response = await server.fetch(url, init);
    if (sends > 1) return response;
    await response.text();
    throw new TypeError('fetch failed');
  };
  const client = createTRPCClient<typeof server.router>({
    links: [
      idempotencyLink({ retry: { baseDelayMs: 1, maxDelayMs: 5 } }),
      // A string input cannot carry the key, and a batch's shared headers carry none.
      httpBatchLink({ url: 'http://server/trpc', fetch: losingFirstAnswer, headers: idempotencyHeaders }),
    ],
  });
  await expect(client.archive.mutate('post-1')).rejects.toThrow('fetch failed');
  expect({ sends, runs: server.counts.runs }).toEqual({ sends: 1, runs: 1 });
});

it('says how to send the key of a string input the server refused without one, keeping its answer', async () => {
  const server = archiveServer(true);
  const client = createTRPCClient<typeof server.router>({
    links: [
      idempotencyLink(), // sendKeyIn: 'input', which a string input cannot take
      httpBatchLink({ url: 'http://server/trpc', fetch: server.fetch, headers: idempotencyHeaders }),
    ],
  });
  const error = await client.archive.mutate('post-1').catch((e: unknown) => e);

  expect(error).toBeInstanceOf(TRPCClientError);
  const { message, cause } = error as TRPCClientError<typeof server.router>;
  expect(message).toMatch(
    /^idempotencyLink gave this mutation the key "[0-9a-f-]{36}", but it was never sent/,
  );
  expect(message).toContain('only as the Idempotency-Key header');
  expect(message).toContain('httpLink({ headers: idempotencyHeaders })');
  expect(message).toContain('give the procedure an object input');
  expect(message).not.toContain('sendKeyIn');
  expect(cause).toBeInstanceOf(TRPCClientError);
  expect(cause?.message).toMatch(/^"archive" requires an idempotency key/);
  expect(server.counts.runs).toBe(0);
});

/**
 * A server of one mutation whose input is `input` (behind `idempotency()`), over `fetch`, with the
 * idempotency error formatter unless `formatter` is false; `refuse` makes the resolver answer its
 * own `BAD_REQUEST`.
 */
function noteServer(input: z.ZodType, { formatter = true, refuse = false } = {}) {
  const counts = { runs: 0 };
  const t = formatter
    ? initTRPC.context<{ userId: string }>().create({ errorFormatter: idempotencyErrorFormatter })
    : initTRPC.context<{ userId: string }>().create();
  const router = t.router({
    note: t.procedure
      .input(input)
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.userId }))
      .mutation(() => {
        ++counts.runs;
        if (refuse) throw new TRPCError({ code: 'BAD_REQUEST', message: 'No active subscription' });
        return counts.runs;
      }),
  });
  const fetch = fetchOf(router);
  const client = createTRPCClient<typeof router>({
    links: [idempotencyLink(), httpBatchLink({ url: 'http://server/trpc', fetch })],
  });
  return { client, counts };
}

it.each([
  ['an optional object input', z.object({ text: z.string() }).optional()],
  ['a void input', z.void()],
])(
  'says how to key a mutation of %s called without one, which refused { idempotencyKey }',
  async (_, input) => {
    const { client, counts } = noteServer(input);
    const error = await client.note.mutate(undefined).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    const { message, cause } = error as TRPCClientError<AnyTRPCRouter>;
    expect(message).toMatch(
      /^idempotencyLink sent this mutation, called without an input, with the input \{ idempotencyKey \} to carry its key, and the server refused the call/,
    );
    expect(message).toContain('z.object({ idempotencyKey: z.string() }).optional()');
    expect(message).toContain("sendKeyIn: 'header'");
    expect((cause as TRPCClientError<AnyTRPCRouter>).data?.code).toBe('BAD_REQUEST');
    expect(counts.runs).toBe(0);
  },
);

it.each([true, false])(
  'passes on the resolver’s own BAD_REQUEST to a mutation called without an input as it is (the formatter: %s)',
  async (formatter) => {
    const { client, counts } = noteServer(z.object({ idempotencyKey: z.string() }).optional(), {
      formatter,
      refuse: true,
    });
    const error = await client.note.mutate(undefined).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    expect((error as TRPCClientError<AnyTRPCRouter>).message).toBe('No active subscription');
    expect(counts.runs).toBe(1);
  },
);

it('passes on a refused { idempotencyKey } as the server answered it when the server has no idempotency formatter', async () => {
  const { client, counts } = noteServer(z.void(), { formatter: false });
  const error = await client.note.mutate(undefined).catch((e: unknown) => e);

  expect((error as TRPCClientError<AnyTRPCRouter>).data?.code).toBe('BAD_REQUEST');
  expect((error as TRPCClientError<AnyTRPCRouter>).message).not.toMatch(/^idempotencyLink/);
  expect(counts.runs).toBe(0);
});

it('keys a mutation called without its optional input when the input takes the key field', async () => {
  const { client, counts } = noteServer(z.object({ idempotencyKey: z.string() }).optional());
  await expect(client.note.mutate(undefined)).resolves.toBe(1);
  expect(counts.runs).toBe(1);
});

it.each([
  ['in the input', { idempotencyKey: 42 }, {}],
  ['in the context', {}, { idempotencyKey: 42 }],
])(
  'refuses a key %s that is not a string, sending nothing, where it made a new key each call',
  async (_, input, context) => {
    const { client, counts } = noteServer(z.object({ idempotencyKey: z.unknown() }).partial());
    for (let call = 0; call < 2; call++) {
      const error = await client.note.mutate(input, { context }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TRPCClientError);
      expect((error as Error).message).toBe(
        "idempotencyLink: an idempotency key must be a string, and this mutation's (its context's idempotencyKey or its input's idempotencyKey) is the number 42; nothing was sent",
      );
    }
    expect(counts.runs).toBe(0);
  },
);

it('gives the calls of two clients built with one idempotencyLink keys of their own', async () => {
  const t = initTRPC.create();
  const router = t.router({ pay: t.procedure.mutation(() => 1) });
  const keys: unknown[] = [];
  const losing: TRPCLink<typeof router> =
    () =>
    ({ op }) =>
      observable((observer) => {
        keys.push(op.context.idempotencyKey);
        observer.error(TRPCClientError.from(new Error('socket hang up')));
      });
  // tRPC numbers operations per client: each client's first call is operation 1.
  const link = idempotencyLink<typeof router>({ retry: { attempts: 1 } });
  for (const client of [1, 2].map(() => createTRPCClient<typeof router>({ links: [link, losing] }))) {
    await expect(client.pay.mutate()).rejects.toThrow('socket hang up');
  }

  expect(keys).toHaveLength(2);
  expect(keys[1]).not.toBe(keys[0]);
});
