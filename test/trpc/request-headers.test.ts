import { createTRPCClient, httpLink, TRPCClientError } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { type CreateHTTPContextOptions, createHTTPServer } from '@trpc/server/adapters/standalone';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { memoryStore } from '../../src/index.js';
import { enclosingCallOf } from '../../src/trpc/http-context.js';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { listen } from '../helpers/listen.js';

const t = initTRPC.context<{ user: string }>().create({ errorFormatter: idempotencyErrorFormatter });

/** A standalone server whose context is what `createContext` makes of the request. */
async function serve(
  createContext: (opts: CreateHTTPContextOptions) => { user: string },
  headers: Record<string, string> = { 'Idempotency-Key': 'k-1' },
) {
  let runs = 0;
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number() }))
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user }))
      .mutation(() => ++runs),
  });
  const server = createHTTPServer({ router, createContext });
  const { url, close } = await listen(server);
  const client = createTRPCClient<typeof router>({
    links: [httpLink({ url, headers })],
  });
  closers.push(close);
  return { client, runs: () => runs };
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

describe('idempotency() and the request headers createContext passes on', () => {
  it('says it cannot see the request headers when createContext does not pass req on', async () => {
    const { client, runs } = await serve(() => ({ user: 'alice' }));
    const error = await client.pay.mutate({ amount: 1 }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    const { message, data } = error as {
      message: string;
      data: { httpStatus: number; idempotencyCode: string };
    };
    expect([data.httpStatus, data.idempotencyCode]).toEqual([400, 'IDEMPOTENCY_KEY_MISSING']);
    expect(message).toMatch(/cannot see the request headers/);
    expect(message).toContain('createContext: ({ req, res, info }) => ({ req, res, info, … })');
    expect(runs()).toBe(0);
  });

  it('reads the header once createContext passes req on', async () => {
    const { client, runs } = await serve(({ req, res, info }) => ({ req, res, info, user: 'alice' }));
    expect(await client.pay.mutate({ amount: 1 })).toBe(1);
    expect(await client.pay.mutate({ amount: 1 })).toBe(1);
    expect(runs()).toBe(1);
  });

  it('asks for the header when it sees the request headers and no key among them', async () => {
    const { client } = await serve(({ req, res, info }) => ({ req, res, info, user: 'alice' }), {});
    const error = await client.pay.mutate({ amount: 1 }).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(
      /requires an idempotency key: send the Idempotency-Key header or the "idempotencyKey" input field$/,
    );
  });
});

describe('idempotency() on a call made inside another (a server-side caller made from its context)', () => {
  /** `payInvoices`, not idempotent itself, pays each invoice through the idempotent `pay`. */
  async function invoicesServer() {
    const charges: number[] = [];
    const payments = t.router({
      pay: t.procedure
        .input(z.object({ amount: z.number(), idempotencyKey: z.string().optional() }))
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user }))
        .mutation(({ input }) => charges.push(input.amount)),
    });
    const router = t.router({
      payments,
      payInvoices: t.procedure
        .input(z.object({ invoices: z.array(z.object({ amount: z.number(), key: z.string().optional() })) }))
        .mutation(async ({ ctx, input }) => {
          const caller = t.createCallerFactory(payments)(ctx);
          const answers: unknown[] = [];
          for (const { amount, key } of input.invoices) {
            answers.push(
              await caller.pay({ amount, idempotencyKey: key }).catch((error: Error) => error.message),
            );
          }
          return answers;
        }),
    });
    return { router, charges };
  }

  it.each([
    ['passes info on', true],
    ['passes only req on (the URL names the call)', false],
  ])('does not take the request’s header for its key when createContext %s', async (_, withInfo) => {
    const { router, charges } = await invoicesServer();
    const server = createHTTPServer({
      router,
      createContext: ({ req, res, info }) =>
        withInfo ? { req, res, info, user: 'alice' } : { req, res, user: 'alice' },
    });
    const { url, close } = await listen(server);
    closers.push(close);
    const replayedHeaders: (string | null)[] = [];
    const client = createTRPCClient<typeof router>({
      links: [
        httpLink({
          url,
          headers: { 'Idempotency-Key': 'outer-1' },
          fetch: async (input, init) => {
            const response = await fetch(input, init);
            replayedHeaders.push(response.headers.get('Idempotent-Replayed'));
            return response;
          },
        }),
      ],
    });

    // Two invoices of 10: under the request's key the second was answered with the first's charge.
    const unkeyed = await client.payInvoices.mutate({ invoices: [{ amount: 10 }, { amount: 10 }] });
    const refusal = withInfo
      ? /^"pay" requires an idempotency key: it runs inside "payInvoices" \(a server-side/
      : /^"pay" requires an idempotency key: the request URL \(ctx.req.url; createContext passed no info on\) calls "payInvoices", so this looks like a server-side caller/;
    expect(unkeyed).toEqual([expect.stringMatching(refusal), expect.stringMatching(refusal)]);
    expect(charges).toEqual([]);

    const invoices = [
      { amount: 10, key: 'invoice-1' },
      { amount: 10, key: 'invoice-2' },
    ];
    expect(await client.payInvoices.mutate({ invoices })).toEqual([1, 2]);
    expect(charges).toEqual([10, 10]);
    // Sent again: the calls inside replay, and the request's own answer does not say it replayed.
    expect(await client.payInvoices.mutate({ invoices })).toEqual([1, 2]);
    expect(charges).toEqual([10, 10]);
    expect(replayedHeaders).toEqual([null, null, null]);
  });
});

describe('idempotency() when only the request URL shows which procedure the request calls', () => {
  it.each([
    ['required', true],
    ['optional', false],
  ])(
    "reads a nested router's path under tRPC's pathSeparator as the request's own call (key %s)",
    async (_, required) => {
      const separated = initTRPC.context<{ user: string }>().create({ pathSeparator: '~' });
      let runs = 0;
      const router = separated.router({
        billing: separated.router({
          pay: separated.procedure
            .input(z.object({ amount: z.number() }))
            .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user, required }))
            .mutation(() => ++runs),
        }),
      });
      // No info passed on: the URL, /billing~pay, names the call.
      const server = createHTTPServer({
        router,
        createContext: ({ req, res }) => ({ req, res, user: 'alice' }),
      });
      const { url, close } = await listen(server);
      closers.push(close);
      const client = createTRPCClient<typeof router>({
        links: [httpLink({ url, pathSeparator: '~', headers: { 'Idempotency-Key': 'k-1' } })],
      });
      expect(await client.billing.pay.mutate({ amount: 1 })).toBe(1);
      expect(await client.billing.pay.mutate({ amount: 1 })).toBe(1);
      expect(runs).toBe(1);
    },
  );

  it.each([
    ['billing~pay', undefined],
    ['billing_pay', undefined],
    ['billing-pay', undefined],
    ['billing.pay', undefined],
    // Joined by what tRPC's pathSeparator cannot be: another procedure.
    ['billingoutpay', 'billingoutpay'],
    ['billing~~pay', 'billing~~pay'],
    ['billing~pay~', 'billing~pay~'],
  ])('reads the URL /trpc/%s as billing.pay itself, or the call it runs inside (%s)', (piece, enclosing) => {
    const called = enclosingCallOf({ req: { url: `/trpc/${piece}` } }, 'billing.pay', 0);
    expect(called).toEqual(enclosing === undefined ? undefined : { path: enclosing, fromUrl: true });
  });

  /** A caller made in a REST route from its request: `caller({ req }).pay(req.body)` on POST /api/payments. */
  function restRoute(required: boolean) {
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .input(z.object({ amount: z.number() }))
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user, required }))
        .mutation(() => ++runs),
    });
    const headers = { 'idempotency-key': 'k-rest' };
    const call = (context: object) =>
      t
        .createCallerFactory(router)({ user: 'alice', ...context })
        .pay({ amount: 1 })
        .then(
          (result) => result,
          (error: Error) => error.message,
        );
    return { call, headers, runs: () => runs };
  }

  it.each([
    ['required', true],
    ['optional', false],
  ])(
    'refuses a key header it cannot tell is the call’s own, and runs nothing (key %s)',
    async (_, required) => {
      const { call, headers, runs } = restRoute(required);
      const req = { headers, url: '/api/payments' };
      const answers = [await call({ req }), await call({ req })];
      const refusal = new RegExp(
        `^"pay" ${required ? 'requires an idempotency key' : 'cannot tell whether the Idempotency-Key header is its key'}: the request URL \\(ctx.req.url; createContext passed no info on\\) calls "payments".*or give a caller made outside a tRPC request \\(a REST route\\) the request's headers without its URL \\(\\{ headers: req.headers \\}\\)$`,
      );
      expect(answers).toEqual([expect.stringMatching(refusal), expect.stringMatching(refusal)]);
      expect(runs()).toBe(0);
      // As the message says: the headers without the URL.
      expect([await call({ headers }), await call({ headers })]).toEqual([1, 1]);
      expect(runs()).toBe(1);
    },
  );
});
