import { initTRPC, TRPCError } from '@trpc/server';
import { getHTTPStatusCodeFromError } from '@trpc/server/http';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  type IdempotencyEvent,
  IdempotencyKeyInProgressError,
  IdempotencyStoreUnavailableError,
  memoryStore,
  type Store,
} from '../../src/index.js';
import {
  type IdempotencyContext,
  type IdempotencyMeta,
  type IdempotencyOptions,
  idempotency,
  idempotencyErrorData,
  idempotencyErrorFormatter,
} from '../../src/trpc/index.js';

interface Context {
  user: { id: string };
  db?: unknown;
  headers?: Record<string, string | string[] | undefined> | Headers;
  req?: { headers?: unknown; url?: string };
  resHeaders?: Headers;
  res?: { setHeader(name: string, value: string): void };
  info?: { calls: unknown[] };
}

const t = initTRPC.context<Context>().meta<IdempotencyMeta>().create();
const payment = z.object({ amount: z.string(), currency: z.string().default('EUR') });

/** A memory store whose transaction client is `tx`, so tests can see what the resolver got. */
function storeWithTx<Tx>(tx: Tx, base: Store<undefined> = memoryStore()): Store<Tx> {
  return {
    find: (scope, key) => base.find(scope, key),
    lease: { ...base.lease, client: tx },
    transaction: (work) => base.transaction!((session) => work({ ...session, tx })),
  };
}

/** A router with one `pay` mutation behind the middleware, counting resolver runs. */
function setup(options: Partial<IdempotencyOptions<Context, { name: string }>> = {}) {
  const tx = { name: 'the transaction client' };
  const store = storeWithTx(tx);
  const seen: { ctx: unknown; input: unknown }[] = [];
  const middleware = idempotency({ store, scope: ({ ctx }) => ctx.user.id, ...options });
  const router = t.router({
    pay: t.procedure
      .input(payment)
      .use(middleware)
      .mutation(({ ctx, input }) => {
        seen.push({ ctx, input });
        return { paid: input.amount, at: new Date('2026-01-02T03:04:05Z'), run: seen.length };
      }),
  });
  const caller = (ctx: Partial<Context> = {}) =>
    t.createCallerFactory(router)({ user: { id: 'alice' }, ...ctx });
  const withKey = (key: string, ctx: Partial<Context> = {}) =>
    caller({ headers: { 'idempotency-key': key }, ...ctx });
  return { store, tx, seen, router, caller, withKey };
}

async function rejectionOf(promise: Promise<unknown>): Promise<TRPCError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TRPCError);
  return error as TRPCError;
}

describe('idempotency() through createCaller', () => {
  it('runs a mutation once per key and replays its result without running the resolver', async () => {
    const { seen, withKey } = setup();
    const first = await withKey('k-1').pay({ amount: '10.00' });
    const second = await withKey('k-1').pay({ amount: '10.00' });
    expect(second).toEqual(first);
    expect(second.at).toBeInstanceOf(Date);
    expect(seen).toHaveLength(1);
  });

  it('gives the resolver the transaction client as ctx.tx and the key facts as ctx.idempotency', async () => {
    const { seen, tx, withKey } = setup();
    await withKey('k-ctx').pay({ amount: '1' });
    const { ctx } = seen[0]! as { ctx: { tx: unknown; idempotency: IdempotencyContext } };
    expect(ctx.tx).toBe(tx);
    expect(ctx.idempotency).toEqual({
      key: 'k-ctx',
      replayed: false,
      fingerprint: expect.stringMatching(/^[0-9a-f]{64}$/),
      firstSeenAt: expect.any(Date),
      step: expect.any(Function),
    });
  });

  it('puts the transaction client under txName, shadowing ctx.db', async () => {
    const { seen, tx, withKey } = setup({ txName: 'db' as never });
    await withKey('k-db', { db: 'the plain client' }).pay({ amount: '1' });
    expect((seen[0]!.ctx as { db: unknown }).db).toBe(tx);
  });

  it('signals a replay with an Idempotent-Replayed header and an onEvent event', async () => {
    const events: IdempotencyEvent['type'][] = [];
    const { withKey } = setup({ onEvent: (event) => events.push(event.type) });
    const first = new Headers();
    const second = new Headers();
    await withKey('k-h', { resHeaders: first }).pay({ amount: '1' });
    await withKey('k-h', { resHeaders: second }).pay({ amount: '1' });
    expect(first.get('idempotent-replayed')).toBeNull();
    expect(second.get('idempotent-replayed')).toBe('true');
    expect(events).toEqual(['claimed', 'completed', 'replayed']);
  });

  it.each([
    ['Node headers (ctx.req.headers)', (key: string) => ({ req: { headers: { 'idempotency-key': key } } })],
    [
      'a fetch Request (ctx.req.headers)',
      (key: string) => ({ req: new Request('http://x', { headers: { 'Idempotency-Key': key } }) }),
    ],
    ['plain ctx.headers', (key: string) => ({ headers: { 'IDEMPOTENCY-KEY': key } })],
    ['an RFC 8941 string', (key: string) => ({ headers: { 'idempotency-key': `"${key}"` } })],
  ])('reads the key from %s', async (_, contextOf) => {
    const { seen, caller } = setup();
    await caller(contextOf('k-src') as Partial<Context>).pay({ amount: '1' });
    await caller(contextOf('k-src') as Partial<Context>).pay({ amount: '1' });
    expect(seen).toHaveLength(1);
    expect((seen[0]!.ctx as { idempotency: IdempotencyContext }).idempotency.key).toBe('k-src');
  });

  it('reads the header getHeaders points at, under the configured name', async () => {
    const { seen, caller } = setup({
      header: 'X-Request-Key',
      getHeaders: (ctx) => (ctx as Context & { meta: Record<string, string> }).meta,
    });
    const ctx = { meta: { 'x-request-key': 'k-custom' } } as Partial<Context>;
    await caller(ctx).pay({ amount: '1' });
    await caller(ctx).pay({ amount: '1' });
    expect(seen).toHaveLength(1);
  });

  it('asks a call whose input is no object for the header only: it has no field to carry a key in', async () => {
    const router = t.router({
      note: t.procedure
        .input(z.string())
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user.id }))
        .mutation(({ input }) => input),
    });
    const error = await rejectionOf(
      t
        .createCallerFactory(router)({ user: { id: 'a' }, headers: {} } as Context)
        .note('hi'),
    );
    expect((error.cause as Error).message).toBe(
      '"note" requires an idempotency key: send the Idempotency-Key header',
    );
  });

  it('names the configured header and input field when it refuses a key', async () => {
    const { seen, caller } = setup({ header: 'X-Request-Key', inputField: 'requestKey' });
    const repeated = await rejectionOf(
      caller({ headers: { 'x-request-key': ['a', 'b'] } }).pay({ amount: '1' }),
    );
    expect((repeated.cause as Error).message).toBe('X-Request-Key must be sent once, not repeated');
    const disagreeing = await rejectionOf(
      caller({ headers: { 'x-request-key': 'one' } }).pay({ amount: '1', requestKey: 'two' } as never),
    );
    expect((disagreeing.cause as Error).message).toBe(
      'The X-Request-Key header and the requestKey input disagree',
    );
    expect(seen).toHaveLength(0);
  });

  it('takes the key from the input field and leaves it out of the fingerprint', async () => {
    const { seen, caller, withKey } = setup();
    const keyed = t.router({
      pay: t.procedure
        .input(payment.extend({ idempotencyKey: z.string().optional() }))
        .use(idempotency({ store: setup().store, scope: ({ ctx }) => ctx.user.id }))
        .mutation(({ input }) => input),
    });
    // The field is declared: the resolver still sees it, the fingerprint does not.
    const echo = await t
      .createCallerFactory(keyed)({ user: { id: 'a' } })
      .pay({ amount: '1', idempotencyKey: 'f' });
    expect(echo).toEqual({ amount: '1', currency: 'EUR', idempotencyKey: 'f' });

    // Undeclared (the schema strips it): read from the raw input; header and field are one key.
    await withKey('k-field').pay({ amount: '1' });
    await caller().pay({ amount: '1', idempotencyKey: 'k-field' } as never);
    expect(seen).toHaveLength(1);
  });

  it('fingerprints the validated input: defaults applied, unknown fields stripped', async () => {
    const { seen, withKey } = setup();
    await withKey('k-valid').pay({ amount: '1' });
    await withKey('k-valid').pay({ amount: '1', currency: 'EUR', extra: 'dropped' } as never);
    expect(seen).toHaveLength(1);
  });

  it('rejects a header and an input field that disagree as BAD_REQUEST / IDEMPOTENCY_KEY_INVALID', async () => {
    const { seen, withKey } = setup();
    const error = await rejectionOf(withKey('one').pay({ amount: '1', idempotencyKey: 'two' } as never));
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.cause).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' });
    expect(seen).toHaveLength(0);
  });

  it.each([
    ['several header values', ['a', 'b']],
    ['a list', 'a, b'],
    ['a non-ASCII key', 'clé'],
    ['an empty key', '""'],
  ])('rejects %s as IDEMPOTENCY_KEY_INVALID', async (_, value) => {
    const { seen, caller } = setup();
    const error = await rejectionOf(caller({ headers: { 'idempotency-key': value } }).pay({ amount: '1' }));
    expect([error.code, (error.cause as { code?: string }).code]).toEqual([
      'BAD_REQUEST',
      'IDEMPOTENCY_KEY_INVALID',
    ]);
    expect(seen).toHaveLength(0);
  });

  it('rejects a missing key as BAD_REQUEST / IDEMPOTENCY_KEY_MISSING without running the resolver', async () => {
    const { seen, caller } = setup();
    const error = await rejectionOf(caller().pay({ amount: '1' }));
    expect(error.code).toBe('BAD_REQUEST');
    expect(error.cause).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING' });
    expect(error.message).toContain('Idempotency-Key');
    expect(seen).toHaveLength(0);
  });

  it('runs keyless calls unrecorded, in a transaction, when the key is optional', async () => {
    const { seen, tx, caller } = setup({ required: false });
    await caller().pay({ amount: '1' });
    await caller().pay({ amount: '1' });
    expect(seen).toHaveLength(2);
    expect(seen[0]!.ctx).toMatchObject({ tx, idempotency: null });
  });

  it('lets .meta({ idempotency }) override required and ttlMs per procedure', async () => {
    const store = storeWithTx('tx');
    const runs = { optional: 0, strict: 0, brief: 0 };
    // Made outside .use(): the scope's parameter says which context it needs.
    const scope = ({ ctx }: { ctx: Context }) => ctx.user.id;
    const middleware = idempotency({ store, scope });
    const lenient = idempotency({ store, scope, required: false });
    const router = t.router({
      optional: t.procedure
        .meta({ idempotency: { required: false } })
        .input(payment)
        .use(middleware)
        .mutation(() => ++runs.optional),
      strict: t.procedure
        .meta({ idempotency: { required: true } })
        .input(payment)
        .use(lenient)
        .mutation(() => ++runs.strict),
      brief: t.procedure
        .meta({ idempotency: { ttlMs: 300 } })
        .input(payment)
        .use(middleware)
        .mutation(() => ++runs.brief),
    });
    const caller = t.createCallerFactory(router);
    const anonymous = caller({ user: { id: 'u' } });
    const keyed = caller({ user: { id: 'u' }, headers: { 'idempotency-key': 'k-meta' } });

    await anonymous.optional({ amount: '1' });
    expect(runs.optional).toBe(1);
    expect((await rejectionOf(anonymous.strict({ amount: '1' }))).code).toBe('BAD_REQUEST');
    expect(runs.strict).toBe(0);

    await keyed.brief({ amount: '1' });
    await keyed.brief({ amount: '1' });
    expect(runs.brief).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 400));
    await keyed.brief({ amount: '1' });
    expect(runs.brief).toBe(2);
  });

  it('passes leaseMs and heartbeatMs of .meta({ idempotency }) on to a lease-mode call', async () => {
    const store = memoryStore();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const router = t.router({
      charge: t.procedure
        .meta({ idempotency: { mode: 'lease', leaseMs: 2_000, heartbeatMs: 50 } })
        .input(payment)
        .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id }))
        .mutation(async () => {
          await gate;
          return 'charged';
        }),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const first = caller.charge({ amount: '1' });
    await expect.poll(() => store.find('u', 'k')).toMatchObject({ status: 'IN_PROGRESS' });
    const claimed = (await store.find('u', 'k'))!;
    // The meta's lease, not the default 30 s (a beat may already have moved it on a little).
    const leaseMs = claimed.lockedUntil!.getTime() - claimed.createdAt.getTime();
    expect(leaseMs).toBeGreaterThanOrEqual(2_000);
    expect(leaseMs).toBeLessThan(3_000);
    // The heartbeat moves the lease on while the resolver runs.
    await expect
      .poll(async () => (await store.find('u', 'k'))!.lockedUntil!.getTime())
      .toBeGreaterThan(claimed.lockedUntil!.getTime());
    release();
    expect(await first).toBe('charged');
  });

  it('lets queries and subscriptions through untouched, without a key', async () => {
    const store = storeWithTx('tx');
    const middleware = idempotency({ store, scope: ({ ctx }: { ctx: Context }) => ctx.user.id });
    let reads = 0;
    const router = t.router({
      read: t.procedure
        .input(payment)
        .use(middleware)
        .query(({ ctx }) => ({ reads: ++reads, hasTx: 'tx' in ctx })),
      watch: t.procedure
        .input(payment)
        .use(middleware)
        .subscription(async function* () {
          yield 'tick';
        }),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' } });
    await caller.read({ amount: '1' });
    expect(await caller.read({ amount: '1' })).toEqual({ reads: 2, hasTx: false });
    const ticks: string[] = [];
    for await (const tick of await caller.watch({ amount: '1' })) ticks.push(tick);
    expect(ticks).toEqual(['tick']);
  });

  it('fails with a message saying so when it sits before .input()', async () => {
    let runs = 0;
    const router = t.router({
      early: t.procedure
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user.id }))
        .input(payment)
        .mutation(() => ++runs),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const error = await rejectionOf(caller.early({ amount: '1' }));
    expect(error.code).toBe('INTERNAL_SERVER_ERROR');
    expect(error.message).toMatch(/after every \.input\(/);
    expect(error.message).toContain("fingerprintInput: 'raw'");
    expect(runs).toBe(0);
  });

  it('never stores the placement error for replay, even when replayErrors accepts every error', async () => {
    const store = memoryStore();
    const router = t.router({
      early: t.procedure
        .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id, mode: 'lease', replayErrors: () => true }))
        .input(payment)
        .mutation(() => 'ran'),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    expect((await rejectionOf(caller.early({ amount: '1' }))).code).toBe('INTERNAL_SERVER_ERROR');
    expect(await store.find('u', 'k')).toBeNull();
  });

  it('refuses to run before a later .input(), whose fields the fingerprint would miss, and keeps nothing', async () => {
    const store = memoryStore();
    let runs = 0;
    // A base procedure with the org id, extended per route with more input.
    const orgProcedure = t.procedure
      .input(z.object({ orgId: z.string() }))
      .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id }));
    const router = t.router({
      pay: orgProcedure
        .input(z.object({ amount: z.number() }))
        .mutation(({ input }) => ++runs + input.amount),
      // After every .input(), the whole validated input is fingerprinted.
      payAfter: t.procedure
        .input(z.object({ orgId: z.string() }))
        .input(z.object({ amount: z.number() }))
        .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id }))
        .mutation(({ input }) => input.amount),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const error = await rejectionOf(caller.pay({ orgId: 'o1', amount: 10 }));
    expect(error.code).toBe('INTERNAL_SERVER_ERROR');
    expect(error.message).toMatch(/runs before something that reads the raw input, an \.input\(\)/);
    expect(runs).toBe(0);
    expect(await store.find('u', 'k')).toBeNull();

    expect(await caller.payAfter({ orgId: 'o1', amount: 10 })).toBe(10);
    const mismatch = await rejectionOf(caller.payAfter({ orgId: 'o1', amount: 9_999 }));
    expect(mismatch.code).toBe('UNPROCESSABLE_CONTENT');
  });

  it('names getRawInput() when a later middleware reads the raw input; under fingerprintInput raw it is served', async () => {
    const audit: unknown[] = [];
    const audited = t.middleware(async ({ getRawInput, next }) => {
      audit.push(await getRawInput());
      return next();
    });
    const procedure = (fingerprintInput: 'raw' | 'validated') =>
      t.procedure
        .input(z.object({ amount: z.number() }))
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user.id, fingerprintInput }))
        .use(audited)
        .mutation(({ input }) => input.amount);
    const router = t.router({ validated: procedure('validated'), raw: procedure('raw') });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const error = await rejectionOf(caller.validated({ amount: 5 }));
    expect(error.message).toContain('a middleware calling getRawInput()');
    expect(await caller.raw({ amount: 5 })).toBe(5);
    expect(audit).toEqual([{ amount: 5 }]);
  });

  it('works on a mutation without input, keyed by the header', async () => {
    let runs = 0;
    const router = t.router({
      ping: t.procedure
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user.id }))
        .mutation(() => ++runs),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    expect(await caller.ping()).toBe(1);
    expect(await caller.ping()).toBe(1);
  });

  it('takes the key from the input of a mutation without .input(), fingerprinting no input', async () => {
    let runs = 0;
    const store = memoryStore();
    const router = t.router({
      ping: t.procedure.use(idempotency({ store, scope: ({ ctx }) => ctx.user.id })).mutation(() => ++runs),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' } });
    const ping = caller.ping as unknown as (input: object) => Promise<number>;
    expect(await ping({ idempotencyKey: 'k' })).toBe(1);
    expect(await ping({ idempotencyKey: 'k' })).toBe(1);
    // The header carries the same call: the procedure has no input to tell them apart.
    const viaHeader = t.createCallerFactory(router)({
      user: { id: 'u' },
      headers: { 'idempotency-key': 'k' },
    });
    expect(await viaHeader.ping()).toBe(1);
    expect(runs).toBe(1);
  });

  it('rejects the same key with another input as UNPROCESSABLE_CONTENT / IDEMPOTENCY_KEY_MISMATCH', async () => {
    const { seen, withKey } = setup();
    await withKey('k-mm').pay({ amount: '1' });
    const error = await rejectionOf(withKey('k-mm').pay({ amount: '2' }));
    expect(error.code).toBe('UNPROCESSABLE_CONTENT');
    expect(error.cause).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISMATCH', firstSeenAt: expect.any(Date) });
    expect(seen).toHaveLength(1);
  });

  it('keeps scopes apart: another user with the same key runs on their own', async () => {
    const { seen, withKey } = setup();
    await withKey('shared').pay({ amount: '1' });
    await withKey('shared', { user: { id: 'bob' } }).pay({ amount: '2' });
    expect(seen.map((s) => (s.ctx as Context).user.id)).toEqual(['alice', 'bob']);
  });

  it('refuses a null scope unless allowGlobalScope is set', async () => {
    const refused = idempotency({ store: memoryStore(), scope: () => null });
    const global = idempotency({ store: memoryStore(), scope: () => null, allowGlobalScope: true });
    let runs = 0;
    const router = t.router({
      refused: t.procedure
        .input(payment)
        .use(refused)
        .mutation(() => ++runs),
      global: t.procedure
        .input(payment)
        .use(global)
        .mutation(() => ++runs),
    });
    const callerOf = (id: string) =>
      t.createCallerFactory(router)({ user: { id }, headers: { 'idempotency-key': 'k' } });
    expect((await rejectionOf(callerOf('a').refused({ amount: '1' }))).code).toBe('INTERNAL_SERVER_ERROR');
    await callerOf('a').global({ amount: '1' });
    await callerOf('b').global({ amount: '1' });
    expect(runs).toBe(1);
  });

  it('sets no Retry-After on a batch for the sake of one of its calls', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const router = t.router({
      slow: t.procedure
        .input(payment)
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user.id, waitTimeoutMs: 50 }))
        .mutation(async () => {
          await gate;
          return 'done';
        }),
    });
    const headers = new Map<string, string>();
    // Both calls in a batch of two, as `createContext` passes tRPC's `info` on.
    const callerOf = () =>
      t.createCallerFactory(router)({
        user: { id: 'u' },
        info: { calls: [{}, {}] },
        res: { setHeader: (name, value) => headers.set(name, value) },
      });
    const first = callerOf().slow({ amount: '1', idempotencyKey: 'k' } as never);
    const error = await rejectionOf(callerOf().slow({ amount: '1', idempotencyKey: 'k' } as never));
    release();
    expect(await first).toBe('done');
    expect(error.code).toBe('CONFLICT');
    // The batch's other call may have succeeded: a client would read this header for it too.
    expect(Object.fromEntries(headers)).toEqual({});
  });

  it("never stores a later .input()'s refusal under fingerprintInput: 'raw', whatever replayErrors says", async () => {
    let runs = 0;
    const base = t.procedure.use(
      idempotency({
        store: memoryStore(),
        scope: ({ ctx }) => ctx.user.id,
        fingerprintInput: 'raw',
        replayErrors: (error) => error instanceof TRPCError && error.code === 'BAD_REQUEST',
      }),
    );
    const router = t.router({
      pay: base.input(payment).mutation(({ input }) => `${++runs}: ${input.amount}`),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    expect((await rejectionOf(caller.pay({ amount: 1 } as never))).code).toBe('BAD_REQUEST');
    // The resolver never ran: the key is still free for the corrected input.
    await expect(caller.pay({ amount: '1' })).resolves.toBe('1: 1');
  });

  it("never stores an ArkType type's refusal under fingerprintInput: 'raw' either", async () => {
    // What ArkType's `assert` throws (tRPC calls it, not the Standard Schema interface): a
    // `TraversalError` listing its errors in a non-enumerable `arkErrors`, with no `issues`.
    class TraversalError extends Error {
      override name = 'TraversalError';
      constructor(errors: string[]) {
        super(errors.join('\n'));
        Object.defineProperty(this, 'arkErrors', { value: errors, enumerable: false });
      }
    }
    const arkLike = Object.assign((raw: unknown) => raw as { amount: string }, {
      assert: (raw: unknown) => {
        const { amount } = raw as { amount: unknown };
        if (typeof amount !== 'string')
          throw new TraversalError([`amount must be a string (was ${typeof amount})`]);
        return { amount };
      },
    });
    let runs = 0;
    const base = t.procedure.use(
      idempotency({
        store: memoryStore(),
        scope: ({ ctx }) => ctx.user.id,
        fingerprintInput: 'raw',
        replayErrors: (error) => error instanceof TRPCError && error.code === 'BAD_REQUEST',
      }),
    );
    const router = t.router({
      pay: base.input(arkLike).mutation(({ input }) => `${++runs}: ${input.amount}`),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const refused = await rejectionOf(caller.pay({ amount: 1 } as never));
    expect([refused.code, refused.cause?.name]).toEqual(['BAD_REQUEST', 'TraversalError']);
    await expect(caller.pay({ amount: '1' })).resolves.toBe('1: 1');
  });

  it('answers a duplicate still running after waitTimeoutMs with CONFLICT and a Retry-After header', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const router = t.router({
      slow: t.procedure
        .input(payment)
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user.id, waitTimeoutMs: 50 }))
        .mutation(async () => {
          await gate;
          return 'done';
        }),
    });
    // A Node response this time (ctx.res), as the standalone adapter passes it.
    const callerOf = (res: Context['res']) =>
      t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' }, res });
    const headers = new Map<string, string>();
    const first = callerOf({ setHeader: () => undefined }).slow({ amount: '1' });
    const error = await rejectionOf(
      callerOf({ setHeader: (name, value) => headers.set(name, value) }).slow({ amount: '1' }),
    );
    release();
    expect(await first).toBe('done');
    expect(error.code).toBe('CONFLICT');
    expect(error.cause).toBeInstanceOf(IdempotencyKeyInProgressError);
    expect(Object.fromEntries(headers)).toEqual({ 'Retry-After': '1' });
    const shaped = idempotencyErrorFormatter({ shape: { data: { code: error.code } }, error });
    expect(shaped.data).toEqual({
      code: 'CONFLICT',
      idempotencyCode: 'IDEMPOTENCY_KEY_IN_PROGRESS',
      retryAfterMs: 1000,
    });
  });

  it('answers an unreachable store with SERVICE_UNAVAILABLE without running the resolver', async () => {
    const unavailable = async (): Promise<never> => {
      throw new IdempotencyStoreUnavailableError();
    };
    const store: Store<undefined> = {
      find: unavailable,
      transaction: unavailable,
      lease: {
        client: undefined,
        claim: unavailable,
        extend: unavailable,
        complete: unavailable,
        release: unavailable,
      },
    };
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .input(payment)
        .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id }))
        .mutation(() => ++runs),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const error = await rejectionOf(caller.pay({ amount: '1' }));
    expect(error.code).toBe('SERVICE_UNAVAILABLE');
    expect(error.cause).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' });
    expect(runs).toBe(0);
  });

  it('fails closed with INTERNAL_SERVER_ERROR / IDEMPOTENCY_RESULT_TOO_LARGE and stores nothing', async () => {
    const { store, seen, withKey } = setup({ maxResultBytes: 10 });
    const error = await rejectionOf(withKey('k-big').pay({ amount: '1' }));
    expect(error.code).toBe('INTERNAL_SERVER_ERROR');
    expect(error.cause).toMatchObject({ code: 'IDEMPOTENCY_RESULT_TOO_LARGE' });
    expect(await store.find('alice', 'k-big')).toBeNull();
    expect(seen).toHaveLength(1);
  });

  it('in lease mode keeps a too-large result as its error, and replays it with the same idempotency code', async () => {
    const { seen, withKey } = setup({ maxResultBytes: 10, mode: 'lease' });
    const first = await rejectionOf(withKey('k-big').pay({ amount: '1' }));
    const replay = await rejectionOf(withKey('k-big').pay({ amount: '1' }));
    expect(seen).toHaveLength(1);
    for (const error of [first, replay]) {
      expect(error.code).toBe('INTERNAL_SERVER_ERROR');
      expect(idempotencyErrorData(error)).toEqual({ idempotencyCode: 'IDEMPOTENCY_RESULT_TOO_LARGE' });
    }
  });

  it('answers a result that cannot be stored with INTERNAL_SERVER_ERROR (500) / IDEMPOTENCY_RESULT_UNSTORABLE, storing nothing', async () => {
    const store = memoryStore();
    let runs = 0;
    const router = t.router({
      echo: t.procedure
        .input(payment)
        .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id }))
        .mutation(() => {
          runs++;
          return JSON.parse('{"__proto__": 1}') as unknown;
        }),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const error = await rejectionOf(caller.echo({ amount: '1' }));
    expect(error.code).toBe('INTERNAL_SERVER_ERROR');
    expect(getHTTPStatusCodeFromError(error)).toBe(500);
    expect(error.cause).toMatchObject({ code: 'IDEMPOTENCY_RESULT_UNSTORABLE' });
    expect(await store.find('u', 'k')).toBeNull();
    expect(runs).toBe(1);
  });

  it('rolls back on a thrown TRPCError and leaves the key retryable', async () => {
    const store = memoryStore();
    let fail = true;
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .input(payment)
        .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id }))
        .mutation(() => {
          runs++;
          if (fail) throw new TRPCError({ code: 'BAD_GATEWAY', message: 'gateway down' });
          return 'paid';
        }),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const error = await rejectionOf(caller.pay({ amount: '1' }));
    expect([error.code, error.message]).toEqual(['BAD_GATEWAY', 'gateway down']);
    expect(await store.find('u', 'k')).toBeNull();
    fail = false;
    expect(await caller.pay({ amount: '1' })).toBe('paid');
    expect(runs).toBe(2);
  });

  it('replays errors that replayErrors accepts as a TRPCError with the same code and message', async () => {
    let runs = 0;
    const headers = [new Headers(), new Headers()];
    const router = t.router({
      pay: t.procedure
        .input(payment)
        .use(
          idempotency({
            store: memoryStore(),
            scope: ({ ctx }) => ctx.user.id,
            replayErrors: (error) => error instanceof TRPCError && error.code === 'PAYMENT_REQUIRED',
          }),
        )
        .mutation(() => {
          runs++;
          throw new TRPCError({ code: 'PAYMENT_REQUIRED', message: 'card declined' });
        }),
    });
    const callerOf = (resHeaders: Headers) =>
      t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' }, resHeaders });
    const first = await rejectionOf(callerOf(headers[0]!).pay({ amount: '1' }));
    const replayed = await rejectionOf(callerOf(headers[1]!).pay({ amount: '1' }));
    expect(runs).toBe(1);
    expect([replayed.code, replayed.message]).toEqual([first.code, first.message]);
    expect(headers.map((h) => h.get('idempotent-replayed'))).toEqual([null, 'true']);
  });

  /**
   * `pay`, whose resolver throws what `thrown()` makes, behind a middleware whose `replayErrors`
   * records what it is offered and keeps what `keep` accepts; called twice with one key.
   */
  async function payThrowing(thrown: () => unknown, keep: (error: unknown) => boolean) {
    const offered: unknown[] = [];
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .input(payment)
        .use(
          idempotency({
            store: memoryStore(),
            scope: ({ ctx }) => ctx.user.id,
            replayErrors: (error) => {
              offered.push(error);
              return keep(error);
            },
          }),
        )
        .mutation(() => {
          runs++;
          throw thrown();
        }),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const first = await rejectionOf(caller.pay({ amount: '1' }));
    const replayed = await rejectionOf(caller.pay({ amount: '1' }));
    return { first, replayed, offered, runs };
  }
  const codeIs = (code: string) => (error: unknown) => (error as { code?: unknown }).code === code;

  it("offers replayErrors the resolver's own error, not tRPC's wrapper, and answers as tRPC does", async () => {
    class CardDeclined extends Error {
      readonly code = 'CARD_DECLINED';
    }
    const thrown: Error[] = [];
    const { first, replayed, offered, runs } = await payThrowing(() => {
      thrown.push(new CardDeclined('card declined'));
      return thrown.at(-1);
    }, codeIs('CARD_DECLINED'));
    expect(runs).toBe(1);
    expect(offered).toHaveLength(1);
    expect(offered[0]).toBe(thrown[0]);
    // tRPC's own answer to a thrown Error, as without the middleware.
    expect([first.code, first.message, first.cause]).toEqual([
      'INTERNAL_SERVER_ERROR',
      'card declined',
      thrown[0],
    ]);
    expect([replayed.code, replayed.message]).toEqual(['INTERNAL_SERVER_ERROR', 'card declined']);
    // Its cause as the core keeps errors: an error formatter reading `error.cause` answers alike.
    expect(replayed.cause).toMatchObject({ message: 'card declined', code: 'CARD_DECLINED' });
  });

  it('offers replayErrors what tRPC kept of a thrown object that is not an Error, not its wrapper', async () => {
    // A payment SDK's plain error object.
    const { first, replayed, offered, runs } = await payThrowing(
      () => ({ code: 'CARD_DECLINED', message: 'card declined' }),
      codeIs('CARD_DECLINED'),
    );
    expect(runs).toBe(1);
    // tRPC keeps a copy of the object's fields (the object itself is gone): that copy is offered.
    expect(offered).toHaveLength(1);
    expect(offered[0]).toMatchObject({ code: 'CARD_DECLINED', message: 'card declined' });
    expect(offered[0]).not.toBeInstanceOf(TRPCError);
    expect([first.code, first.message]).toEqual(['INTERNAL_SERVER_ERROR', 'card declined']);
    expect([replayed.code, replayed.message]).toEqual(['INTERNAL_SERVER_ERROR', 'card declined']);
  });

  it('offers replayErrors a TRPCError the resolver threw with an object as its cause as it is', async () => {
    const { offered, runs } = await payThrowing(
      () =>
        new TRPCError({
          code: 'INTERNAL_SERVER_ERROR',
          message: 'the gateway failed',
          cause: { gatewayCode: 'G-17' },
        }),
      (error) => error instanceof TRPCError,
    );
    expect(offered).toHaveLength(1);
    expect(offered[0]).toBeInstanceOf(TRPCError);
    expect(runs).toBe(1);
  });

  it('offers replayErrors a TRPCError the resolver threw as it is, even one wrapping another error', async () => {
    const thrown = new TRPCError({ code: 'INTERNAL_SERVER_ERROR', cause: new Error('card declined') });
    const { first, offered } = await payThrowing(
      () => thrown,
      () => false,
    );
    expect(first).toBe(thrown);
    expect(offered).toEqual([thrown, thrown]);
    expect(offered[0]).toBe(thrown);
  });

  it('validates replays with an .output() placed before it', async () => {
    let strict = false;
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .input(payment)
        .output(z.object({ id: z.number() }).refine((value) => !strict || value.id > 100))
        .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user.id }))
        .mutation(() => ({ id: ++runs })),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    expect(await caller.pay({ amount: '1' })).toEqual({ id: 1 });
    strict = true; // say, a deploy tightened the output schema
    const error = await rejectionOf(caller.pay({ amount: '1' }));
    expect([error.code, error.message]).toEqual(['INTERNAL_SERVER_ERROR', 'Output validation failed']);
    expect(runs).toBe(1);
  });

  it('stores the validated output with an .output() placed after it, so replays match the first answer', async () => {
    let runs = 0;
    const store = memoryStore();
    const router = t.router({
      pay: t.procedure
        .input(payment)
        .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id }))
        .output(z.object({ id: z.number() }))
        .mutation(() => ({ id: ++runs, secret: 'stripped by the output schema' })),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    const first = await caller.pay({ amount: '1' });
    const second = await caller.pay({ amount: '1' });
    expect(first).toEqual({ id: 1 });
    expect(second).toEqual(first);
    expect((await store.find('u', 'k'))?.result).not.toContain('secret');
  });

  it('runs behind .concat() as behind .use()', async () => {
    let runs = 0;
    const idempotent = t.procedure.use(
      idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user.id }),
    );
    const router = t.router({
      pay: t.procedure
        .input(payment)
        .concat(idempotent)
        .mutation(({ ctx }) => ({ runs: ++runs, key: ctx.idempotency?.key })),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'u' }, headers: { 'idempotency-key': 'k' } });
    await caller.pay({ amount: '1' });
    expect(await caller.pay({ amount: '1' })).toEqual({ runs: 1, key: 'k' });
  });

  it.each([
    [
      'ctx.info says so',
      (key?: string) => ({ info: { calls: [{}, {}] }, headers: key ? { 'idempotency-key': key } : {} }),
    ],
    [
      'the request URL says so',
      (key?: string) => ({
        req: { headers: key ? { 'idempotency-key': key } : {}, url: '/pay,pay?batch=1' },
      }),
    ],
  ])('rejects a header key on a batch of several calls (%s), but takes input keys', async (_, batchOf) => {
    const { seen, caller } = setup();
    const error = await rejectionOf(caller(batchOf('k') as Partial<Context>).pay({ amount: '1' }));
    expect(error.cause).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' });
    await caller(batchOf() as Partial<Context>).pay({ amount: '1', idempotencyKey: 'in-input' } as never);
    await caller(batchOf() as Partial<Context>).pay({ amount: '1', idempotencyKey: 'in-input' } as never);
    expect(seen).toHaveLength(1);
  });
});

describe('idempotency() types', () => {
  it('types ctx.tx as the store transaction client and keeps input and output types', () => {
    const store = storeWithTx({ payment: { create: (amount: string) => ({ amount }) } });
    const procedure = t.procedure
      .input(payment)
      .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id }))
      .mutation(({ ctx, input }) => {
        expectTypeOf(ctx.tx).toEqualTypeOf<{ payment: { create: (amount: string) => { amount: string } } }>();
        expectTypeOf(ctx.idempotency).toEqualTypeOf<IdempotencyContext<typeof ctx.tx> | null>();
        expectTypeOf(ctx.user).toEqualTypeOf<{ id: string }>();
        expectTypeOf(input).toEqualTypeOf<{ amount: string; currency: string }>();
        return ctx.tx.payment.create(input.amount);
      });
    const caller = t.createCallerFactory(t.router({ procedure }))({ user: { id: 'u' } });
    expectTypeOf(caller.procedure)
      .parameter(0)
      .toEqualTypeOf<{ amount: string; currency?: string | undefined }>();
    expectTypeOf(caller.procedure).returns.resolves.toEqualTypeOf<{ amount: string }>();

    const shadowing = t.procedure
      .input(payment)
      .use(idempotency({ store, scope: ({ ctx }) => ctx.user.id, txName: 'db' }))
      .mutation(({ ctx }) => {
        expectTypeOf(ctx.db).toEqualTypeOf<{ payment: { create: (amount: string) => { amount: string } } }>();
        return null;
      });
    expect(shadowing).toBeTypeOf('function');

    // The scope function sees the procedure's context type.
    t.procedure.input(payment).use(
      // @ts-expect-error `name` is not on the user
      idempotency({ store, scope: ({ ctx }) => ctx.user.name }),
    );
  });

  it('gives scope the context narrowed by the middlewares before it', async () => {
    const store = memoryStore();
    const root = initTRPC.context<{ user: { id: string } | null }>().create();
    const protectedProcedure = root.procedure.use(({ ctx, next }) => {
      if (!ctx.user) throw new TRPCError({ code: 'UNAUTHORIZED' });
      return next({ ctx: { user: ctx.user } });
    });
    const scopes: string[] = [];
    const pay = protectedProcedure
      .input(payment)
      .use(
        idempotency({
          store,
          scope: ({ ctx }) => {
            expectTypeOf(ctx.user).toEqualTypeOf<{ id: string }>();
            scopes.push(ctx.user.id);
            return ctx.user.id;
          },
        }),
      )
      .mutation(({ ctx }) => {
        expectTypeOf(ctx.user).toEqualTypeOf<{ id: string }>();
        expectTypeOf(ctx.idempotency?.key).toEqualTypeOf<string | undefined>();
        return ctx.user.id;
      });
    // Before the narrowing, `ctx.user` may still be null.
    root.procedure.input(payment).use(
      // @ts-expect-error 'ctx.user' is possibly 'null'
      idempotency({ store, scope: ({ ctx }) => ctx.user.id }),
    );
    const caller = root.createCallerFactory(root.router({ pay }))({ user: { id: 'alice' } });
    await expect(caller.pay({ amount: '1', idempotencyKey: 'k' } as never)).resolves.toBe('alice');
    expect(scopes).toEqual(['alice']);
    expect(await store.find('alice', 'k')).toMatchObject({ status: 'COMPLETED' });
  });
});
