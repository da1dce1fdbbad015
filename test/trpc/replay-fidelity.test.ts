import { Decimal } from '@prisma/client/runtime/client';
import { initTRPC } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { SuperJSON } from 'superjson';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { prismaStore } from '../../src/prisma/index.js';
import { idempotency } from '../../src/trpc/index.js';
import { connect, describeEachDatabase, type TestPrismaClient, uniqueScope } from '../helpers/databases.js';

// A retry gets the body the first call got, byte for byte, for results whose JSON superjson alone
// would not bring back: a Decimal -0, an array with trailing holes, a float array's NaN, an Error's
// own fields (Promise.allSettled).
function slots() {
  const days = new Array(3);
  days[0] = 'mon';
  return days;
}
const results: [string, () => unknown][] = [
  ['a Decimal -0', () => ({ refund: new Decimal('-0.001').toDecimalPlaces(2) })],
  ['an array with trailing holes', () => ({ slots: slots() })],
  ['a float array with NaN, Infinity and -0', () => ({ samples: new Float64Array([Number.NaN, 1 / 0, -0]) })],
  [
    "Promise.allSettled's rejected reasons",
    () => ({
      settled: [
        { status: 'rejected', reason: Object.assign(new Error('card declined'), { code: 'E_CARD' }) },
      ],
    }),
  ],
];

/** The tRPC transformer of examples/trpc-payments: superjson, with Prisma's Decimal. */
const transformer = new SuperJSON();
transformer.registerCustom<Decimal, string>(
  {
    isApplicable: (value): value is Decimal => Decimal.isDecimal(value),
    serialize: (value) => value.toJSON(),
    deserialize: (text) => new Decimal(text),
  },
  'decimal.js',
);

describeEachDatabase('a replay over tRPC answers the first body', (db) => {
  let prisma: TestPrismaClient;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma.$disconnect());

  it.each(
    results.flatMap(([name, result]) => [
      [name, 'JSON', result] as const,
      [name, 'superjson', result] as const,
    ]),
  )('%s, as %s', async (_name, wire, result) => {
    const t = initTRPC
      .context<{ req: Request; resHeaders: Headers; userId: string }>()
      .create(wire === 'superjson' ? { transformer } : {});
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .input(z.object({ n: z.number() }))
        .use(idempotency({ store: prismaStore(prisma), scope: ({ ctx }) => ctx.userId }))
        .mutation(() => {
          runs++;
          return result();
        }),
    });
    const userId = uniqueScope();
    const call = async () => {
      const response = await fetchRequestHandler({
        endpoint: '/trpc',
        router,
        req: new Request('http://localhost/trpc/pay', {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'Idempotency-Key': 'fidelity' },
          body: JSON.stringify(wire === 'superjson' ? transformer.serialize({ n: 1 }) : { n: 1 }),
        }),
        createContext: ({ req, resHeaders }) => ({ req, resHeaders, userId }),
      });
      return {
        status: response.status,
        replayed: response.headers.get('idempotent-replayed'),
        body: await response.text(),
      };
    };
    const first = await call();
    const retry = await call();
    expect(first).toMatchObject({ status: 200, replayed: null });
    expect(retry).toEqual({ ...first, replayed: 'true' });
    expect(runs).toBe(1);
  });
});
