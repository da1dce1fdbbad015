import { initTRPC, TRPCError } from '@trpc/server';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { memoryStore, stepKey } from '../../src/index.js';
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
});
