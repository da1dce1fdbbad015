import { createServer as createNodeServer } from 'node:http';
import { Decimal } from '@prisma/client/runtime/client';
import { createTRPCClient, httpBatchLink, httpLink, TRPCClientError } from '@trpc/client';
import { type inferRouterInputs, type inferRouterOutputs, TRPCError } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { incomingMessageToRequest } from '@trpc/server/adapters/node-http';
import superjson from 'superjson';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import {
  type AppRouter,
  authenticate,
  createAppRouter,
  createServer,
  t,
} from '../../examples/trpc-payments/app.js';
import { prismaStore } from '../../src/prisma/index.js';
import { idempotencyErrorData } from '../../src/trpc/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { listen } from '../helpers/listen.js';

type PaymentInput = inferRouterInputs<AppRouter>['createPayment'];
type Payment = inferRouterOutputs<AppRouter>['createPayment'];

/** One way of calling `createPayment`: in process, or over HTTP with a given server and link. */
interface Transport {
  name: string;
  /** Calls as `user`, with the key in the `Idempotency-Key` header (or no key). */
  pay(
    user: string,
    input: PaymentInput,
    key?: string,
  ): Promise<{ payment: Payment; replayed: string | null }>;
}

/** What the caller can tell about a failure: the tRPC code, the idempotency code, the status. */
function failureOf(error: unknown) {
  if (error instanceof TRPCClientError) {
    const { data } = error as TRPCClientError<AppRouter>;
    return { code: data?.code, idempotencyCode: data?.idempotencyCode, httpStatus: data?.httpStatus };
  }
  if (error instanceof TRPCError) return { code: error.code, ...idempotencyErrorData(error) };
  throw error;
}

async function failureOfCall(call: Promise<unknown>) {
  return failureOf(
    await call.then(
      () => expect.unreachable('the call succeeded'),
      (error: unknown) => error,
    ),
  );
}

/** A client whose every call is an HTTP request of its own; it remembers the last response's headers. */
function clientOf(
  url: string,
  link: typeof httpLink | typeof httpBatchLink,
  headers: Record<string, string>,
) {
  const last: { headers?: Headers } = {};
  const client = createTRPCClient<AppRouter>({
    links: [
      link({
        url,
        transformer: superjson,
        headers,
        fetch: async (input, init) => {
          const response = await fetch(input, init as RequestInit);
          last.headers = response.headers;
          return response;
        },
      }),
    ],
  });
  return { client, last };
}

const headersOf = (user: string, key?: string): Record<string, string> => ({
  'x-user-id': user,
  ...(key === undefined ? {} : { 'idempotency-key': key }),
});

describeEachDatabase('tRPC createPayment', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let store: ReturnType<typeof prismaStore<typeof prisma>>;
  const urls = { standalone: '', fetch: '' };
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    prisma = await connect(db);
    store = prismaStore(prisma);
    const standalone = await listen(createServer(prisma));
    closers.push(standalone.close);
    urls.standalone = standalone.url;

    // The fetch adapter, served from Node: Request in, Response out.
    const router = createAppRouter(prisma);
    const fetchServer = createNodeServer(async (req, res) => {
      const response = await fetchRequestHandler({
        endpoint: '/trpc',
        req: incomingMessageToRequest(req, res, { maxBodySize: null }),
        router,
        createContext: async ({ req, resHeaders, info }) => ({
          req,
          resHeaders,
          info,
          user: await authenticate(req),
        }),
      });
      res.writeHead(response.status, Object.fromEntries(response.headers));
      res.end(Buffer.from(await response.arrayBuffer()));
    });
    const served = await listen(fetchServer);
    closers.push(served.close);
    urls.fetch = `${served.url}/trpc`;
  });
  afterAll(async () => {
    await Promise.all(closers.map((close) => close()));
    await prisma?.$disconnect();
  });

  const overHttp = (
    name: string,
    server: keyof typeof urls,
    link: typeof httpLink | typeof httpBatchLink,
  ): Transport => ({
    name,
    async pay(user, input, key) {
      const { client, last } = clientOf(urls[server], link, headersOf(user, key));
      const payment = await client.createPayment.mutate(input);
      return { payment, replayed: last.headers?.get('idempotent-replayed') ?? null };
    },
  });
  const transports: Transport[] = [
    {
      name: 'createCaller',
      async pay(user, input, key) {
        const resHeaders = new Headers();
        const ctx = { user: { id: user }, headers: headersOf(user, key), resHeaders };
        const payment = await t.createCallerFactory(createAppRouter(prisma))(ctx).createPayment(input);
        return { payment, replayed: resHeaders.get('idempotent-replayed') };
      },
    },
    overHttp('the standalone adapter and httpLink', 'standalone', httpLink),
    overHttp('the standalone adapter and httpBatchLink', 'standalone', httpBatchLink),
    overHttp('the fetch adapter and httpLink', 'fetch', httpLink),
    overHttp('the fetch adapter and httpBatchLink', 'fetch', httpBatchLink),
  ];

  const paymentsOf = (user: string) => prisma.payment.count({ where: { userId: user } });

  describe.each(transports)('through $name', (transport) => {
    it('a retried payment is written once and answered with the same payment, Date and Decimal intact', async () => {
      const user = uniqueScope();
      const first = await transport.pay(user, { amount: '12.50', currency: 'EUR' }, 'retry-1');
      const retry = await transport.pay(user, { amount: '12.50', currency: 'EUR' }, 'retry-1');
      expect(await paymentsOf(user)).toBe(1);
      expect(retry.payment).toEqual(first.payment);
      expect(retry.payment.amount).toBeInstanceOf(Decimal);
      expect(retry.payment.amount.toFixed(2)).toBe('12.50');
      expect(retry.payment.createdAt).toBeInstanceOf(Date);
      expect([first.replayed, retry.replayed]).toEqual([null, 'true']);
    });

    it('50 concurrent identical requests write one payment and all answer with it', async () => {
      const user = uniqueScope();
      const results = await Promise.all(
        Array.from({ length: 50 }, () => transport.pay(user, { amount: '5.00', currency: 'EUR' }, 'storm')),
      );
      expect(await paymentsOf(user)).toBe(1);
      for (const { payment } of results) expect(payment).toEqual(results[0]!.payment);
      expect(results.filter((r) => r.replayed === 'true').length).toBeGreaterThanOrEqual(1);
    });

    it('the same key with another amount is UNPROCESSABLE_CONTENT / IDEMPOTENCY_KEY_MISMATCH', async () => {
      const user = uniqueScope();
      await transport.pay(user, { amount: '10.00', currency: 'EUR' }, 'mismatch');
      const failure = await failureOfCall(
        transport.pay(user, { amount: '99.00', currency: 'EUR' }, 'mismatch'),
      );
      expect(failure).toMatchObject({
        code: 'UNPROCESSABLE_CONTENT',
        idempotencyCode: 'IDEMPOTENCY_KEY_MISMATCH',
      });
      if (transport.name !== 'createCaller') expect(failure.httpStatus).toBe(422);
      expect(await paymentsOf(user)).toBe(1);
    });

    it('a call without a key is BAD_REQUEST / IDEMPOTENCY_KEY_MISSING and writes nothing', async () => {
      const user = uniqueScope();
      const failure = await failureOfCall(transport.pay(user, { amount: '1.00', currency: 'EUR' }));
      expect(failure).toMatchObject({ code: 'BAD_REQUEST', idempotencyCode: 'IDEMPOTENCY_KEY_MISSING' });
      expect(await paymentsOf(user)).toBe(0);
    });

    it("another user's call with the same key is a payment of its own", async () => {
      const [alice, bob] = [uniqueScope('alice'), uniqueScope('bob')];
      const fromAlice = await transport.pay(alice, { amount: '3.00', currency: 'EUR' }, 'same-key');
      const fromBob = await transport.pay(bob, { amount: '3.00', currency: 'EUR' }, 'same-key');
      expect(fromBob.replayed).toBeNull();
      expect(fromBob.payment.id).not.toBe(fromAlice.payment.id);
      expect([await paymentsOf(alice), await paymentsOf(bob)]).toEqual([1, 1]);
    });

    it('a TRPCError thrown after the write leaves no payment and no record', async () => {
      const user = uniqueScope();
      const failure = await failureOfCall(
        transport.pay(user, { amount: '10000.01', currency: 'EUR' }, 'over'),
      );
      expect([failure.code, failure.idempotencyCode]).toEqual(['FORBIDDEN', null]);
      expect(await paymentsOf(user)).toBe(0);
      expect(await store.find(user, 'over')).toBeNull();
    });
  });

  describe.each(['standalone', 'fetch'] as const)('one HTTP batch through the %s adapter', (server) => {
    it('rejects a header key on two batched mutations as IDEMPOTENCY_KEY_INVALID and runs neither', async () => {
      const user = uniqueScope();
      const { client } = clientOf(urls[server], httpBatchLink, headersOf(user, 'whose-key'));
      const calls = [
        client.createPayment.mutate({ amount: '1.00', currency: 'EUR' }),
        client.createPayment.mutate({ amount: '2.00', currency: 'EUR' }),
      ];
      for (const call of calls) {
        expect(await failureOfCall(call)).toMatchObject({
          code: 'BAD_REQUEST',
          idempotencyCode: 'IDEMPOTENCY_KEY_INVALID',
        });
      }
      expect(await paymentsOf(user)).toBe(0);
    });

    it('takes keys from each call input', async () => {
      const user = uniqueScope();
      const { client, last } = clientOf(urls[server], httpBatchLink, headersOf(user));
      const pay = (amount: string, idempotencyKey: string) =>
        client.createPayment.mutate({ amount, currency: 'EUR', idempotencyKey } as PaymentInput);
      const [a1, a2, b] = await Promise.all([pay('1.00', 'a'), pay('1.00', 'a'), pay('2.00', 'b')]);
      expect(a2).toEqual(a1);
      expect(b.id).not.toBe(a1.id);
      expect(await paymentsOf(user)).toBe(2);
      // One response for three calls: no header could speak for all of them.
      expect(last.headers?.get('idempotent-replayed')).toBeNull();
    });
  });

  it('types the client error data with the idempotency code', () => {
    expectTypeOf<NonNullable<TRPCClientError<AppRouter>['data']>['idempotencyCode']>().toEqualTypeOf<
      | 'IDEMPOTENCY_KEY_MISSING'
      | 'IDEMPOTENCY_KEY_INVALID'
      | 'IDEMPOTENCY_KEY_MISMATCH'
      | 'IDEMPOTENCY_KEY_IN_PROGRESS'
      | 'IDEMPOTENCY_INPUT_UNSUPPORTED'
      | 'IDEMPOTENCY_RESULT_TOO_LARGE'
      | 'IDEMPOTENCY_RESULT_UNSTORABLE'
      | 'IDEMPOTENCY_STORE_UNAVAILABLE'
      | 'IDEMPOTENCY_TRANSACTION_EXPIRED'
      | 'IDEMPOTENCY_OUTCOME_UNKNOWN'
      | 'IDEMPOTENCY_STEP_DIVERGED'
      | null
    >();
    expectTypeOf<Payment['amount']>().toEqualTypeOf<Decimal>();
    expectTypeOf<Payment['createdAt']>().toEqualTypeOf<Date>();
  });
});
