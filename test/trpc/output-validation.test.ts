import { initTRPC, TRPCError } from '@trpc/server';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { memoryStore } from '../../src/index.js';
import { idempotency } from '../../src/trpc/index.js';

const t = initTRPC.context<{ user: string }>().create();

/** A procedure whose `.output()` (after the middleware) refuses what its resolver returns. */
function refusedOutput(mode: 'lease' | 'transactional', replayErrors?: (error: unknown) => boolean) {
  const charges: number[] = [];
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number(), idempotencyKey: z.string() }))
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user, mode, replayErrors }))
      .output(z.object({ id: z.string() }))
      .mutation(({ input }) => ({ id: charges.push(input.amount) as unknown as string })),
  });
  const caller = t.createCallerFactory(router)({ user: 'alice' });
  return { charges, pay: () => caller.pay({ amount: 10, idempotencyKey: 'k-1' }).catch((e: unknown) => e) };
}

describe('idempotency() before an .output() that refuses the result', () => {
  it('in lease mode keeps the key with the refusal, so a retry replays it and the effect happens once', async () => {
    const { charges, pay } = refusedOutput('lease');
    const first = await pay();
    expect(first).toBeInstanceOf(TRPCError);
    expect([(first as TRPCError).code, (first as TRPCError).message]).toEqual([
      'INTERNAL_SERVER_ERROR',
      'Output validation failed',
    ]);
    const retry = await pay();
    expect([(retry as TRPCError).code, (retry as TRPCError).message]).toEqual([
      'INTERNAL_SERVER_ERROR',
      'Output validation failed',
    ]);
    expect(charges).toEqual([10]);
  });

  it.each([
    ['no replayErrors', undefined],
    ['replayErrors accepting every TRPCError', (error: unknown) => error instanceof TRPCError],
  ])(
    'in transactional mode stores nothing, with %s: the refusal rolls the call back, and a retry runs it again',
    async (_, replayErrors) => {
      const { charges, pay } = refusedOutput('transactional', replayErrors);
      expect(await pay()).toMatchObject({
        code: 'INTERNAL_SERVER_ERROR',
        message: 'Output validation failed',
      });
      expect(await pay()).toMatchObject({
        code: 'INTERNAL_SERVER_ERROR',
        message: 'Output validation failed',
      });
      expect(charges).toEqual([10, 10]);
    },
  );
});
