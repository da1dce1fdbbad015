import { initTRPC, TRPCError } from '@trpc/server';
import { getHTTPStatusCodeFromError } from '@trpc/server/http';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  IdempotencyKeyInProgressError,
  IdempotencyStoreUnavailableError,
  memoryStore,
  type Store,
  stepKey,
} from '../../src/index.js';
import { type IdempotencyMeta, idempotency } from '../../src/trpc/index.js';

interface Context {
  user: { id: string };
}

const t = initTRPC.context<Context>().meta<IdempotencyMeta>().create();

/** A checkout of three steps; `crashAfter` fails the mutation after that step. */
function setup() {
  const runs: Record<string, number> = {};
  const keys: string[] = [];
  const state = { crashAfter: undefined as string | undefined };
  const middleware = idempotency({ store: memoryStore(), scope: ({ ctx }: { ctx: Context }) => ctx.user.id });
  const router = t.router({
    checkout: t.procedure
      .meta({ idempotency: { mode: 'lease' } })
      .input(z.object({ sku: z.string() }))
      .use(middleware)
      .mutation(async ({ ctx, input }) => {
        const idempotency = ctx.idempotency!;
        const done: string[] = [];
        for (const name of ['reserve', 'charge', 'ship']) {
          done.push(
            await idempotency.step(name, ({ key }) => {
              runs[name] = (runs[name] ?? 0) + 1;
              if (name === 'charge') keys.push(key);
              return `${name} ${input.sku}`;
            }),
          );
          if (name === state.crashAfter) throw new TRPCError({ code: 'BAD_GATEWAY', message: 'crashed' });
        }
        return done;
      }),
    transactional: t.procedure
      .input(z.object({ sku: z.string(), idempotencyKey: z.string() }))
      .use(middleware)
      .mutation(({ ctx }) => ctx.idempotency!.step('reserve', () => 'reserved')),
  });
  const caller = t.createCallerFactory(router)({ user: { id: 'alice' } });
  return { runs, keys, state, caller };
}

describe('ctx.idempotency.step in a tRPC procedure', () => {
  it('answers a step’s lost lease with its 409, and any other error of ours the resolver throws as the resolver’s', async () => {
    let now = 1_000_000;
    const base = memoryStore({ clock: () => now });
    let calls = 0;
    // The store down at the first step: the resolver may have acted before it, so not a 503.
    const unreachable = {
      ...base,
      steps: { ...base.steps!, list: () => Promise.reject(new IdempotencyStoreUnavailableError('down')) },
    };
    const procedure = (store: Store<undefined>) =>
      t.procedure
        .meta({ idempotency: { mode: 'lease', leaseMs: 1_000 } })
        .input(z.object({ idempotencyKey: z.string() }))
        .use(idempotency({ store, scope: ({ ctx }: { ctx: Context }) => ctx.user.id }));
    const router = t.router({
      checkout: procedure(base).mutation(async ({ ctx }) => {
        if (++calls === 2) return 'the retry';
        return ctx.idempotency!.step('charge', async () => {
          // The charge outlives the lease, and a retry takes the key over and completes.
          now += 5_000;
          await caller.checkout({ idempotencyKey: 'k' });
          return 'charged';
        });
      }),
      unreachable: procedure(unreachable).mutation(({ ctx }) =>
        ctx.idempotency!.step('charge', () => 'charged'),
      ),
      // A nested call's 409 after this resolver's own effect: retrying would repeat that effect.
      nested: procedure(base).mutation(() => {
        throw new IdempotencyKeyInProgressError(1_000);
      }),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'alice' } });
    const answer = (call: Promise<unknown>) =>
      call.then(
        () => undefined,
        (error: TRPCError) => ({ code: error.code, status: getHTTPStatusCodeFromError(error) }),
      );
    expect(await answer(caller.checkout({ idempotencyKey: 'k' }))).toEqual({ code: 'CONFLICT', status: 409 });
    for (const call of [
      caller.unreachable({ idempotencyKey: 'k-2' }),
      caller.nested({ idempotencyKey: 'k-3' }),
    ]) {
      expect(await answer(call)).toEqual({ code: 'INTERNAL_SERVER_ERROR', status: 500 });
    }
  });

  it('resumes a retry after the steps that completed, and replays the result after that', async () => {
    const { runs, keys, state, caller } = setup();
    state.crashAfter = 'charge';
    const input = { sku: 'book', idempotencyKey: 'order-1' };
    await expect(caller.checkout(input)).rejects.toThrow('crashed');
    state.crashAfter = undefined;
    const result = await caller.checkout(input);
    expect(result).toEqual(['reserve book', 'charge book', 'ship book']);
    expect(await caller.checkout(input)).toEqual(result);
    expect(runs).toEqual({ reserve: 1, charge: 1, ship: 1 });
    expect(keys).toEqual([stepKey('alice', 'order-1', 'charge')]);
  });

  it('refuses steps in transactional mode, with the reason', async () => {
    const { caller } = setup();
    await expect(caller.transactional({ sku: 'book', idempotencyKey: 'k' })).rejects.toThrow(
      /needs lease mode/,
    );
  });

  it('never keeps that refusal for the key, whatever replayErrors says', async () => {
    const store = memoryStore();
    const router = t.router({
      pay: t.procedure
        .input(z.object({ idempotencyKey: z.string() }))
        .use(
          idempotency({ store, scope: ({ ctx }: { ctx: Context }) => ctx.user.id, replayErrors: () => true }),
        )
        .mutation(({ ctx }) => ctx.idempotency!.step('charge', () => 'charged')),
    });
    const caller = t.createCallerFactory(router)({ user: { id: 'alice' } });
    await expect(caller.pay({ idempotencyKey: 'k' })).rejects.toThrow(/needs lease mode/);
    expect(await store.find('alice', 'k')).toBeNull();
  });
});
