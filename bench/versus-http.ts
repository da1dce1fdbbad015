// This working tree's tRPC middleware and Envelop plugin against another commit's, over loopback
// HTTP, side by side in one process on PostgreSQL: each side has its own copy of the library (the
// commit's `src` is extracted into `.tmp/versus-http/`), its own client, store, tRPC server and Yoga
// server, and runs the bench's `createPayment` behind them with a fresh key (first attempt). Calls
// alternate side by side, tRPC first, then Yoga; each prints the ratio of the sides' median times
// and the median of each pair's difference. With the commit the tree is at (and no change), the two
// sides run the same code: what that prints is the harness's own noise (here up to 35 µs a pair).
//
//   npm run bench:versus-http -- <commit> [pairs] [postgresql url]
//   (default: 3,000 pairs; a database of its own, idempotent_mutations_profile)
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { createSchema, createYoga } from 'graphql-yoga';
import { z } from 'zod';
import { PrismaClient } from '../generated/postgresql/client.js';
import type * as Envelop from '../src/envelop/index.js';
import type * as Prisma from '../src/prisma/index.js';
import type * as Trpc from '../src/trpc/index.js';
import { graphqlPayment, insertPayment, type PaymentInput, transformer, trpcClient } from './apps.js';
import { prepareDatabase } from './databases.js';
import { interleave } from './stats.js';
import { commitSource, comparedTimes } from './versus-source.js';

const [revision, pairs = '3000', url = 'postgresql://postgres@127.0.0.1:5432/idempotent_mutations_profile'] =
  process.argv.slice(2);
if (!revision) throw new Error('usage: npm run bench:versus-http -- <commit> [pairs] [postgresql url]');
const PAIRS = Number(pairs);
const WARMUP = 200;

const { commit, src, remove } = commitSource(revision, 'versus-http');

type Tx = Parameters<typeof insertPayment>[0];
interface Context {
  req: { headers: Record<string, string | string[] | undefined> };
  userId: string;
}

/** One side: a copy of the library, with a client, a store and servers of its own. */
async function sideOf(src: string) {
  const prisma = (await import(path.join(src, 'prisma/index.ts'))) as typeof Prisma;
  const { idempotency } = (await import(path.join(src, 'trpc/index.ts'))) as typeof Trpc;
  const { useIdempotency } = (await import(path.join(src, 'envelop/index.ts'))) as typeof Envelop;
  const client = new PrismaClient({ adapter: (await prisma.adapterForUrl(url)) as never });
  const reads = (await (await prisma.adapterForUrl(url)).connect()) as Prisma.AdapterQueries & {
    dispose(): Promise<void>;
  };
  const store = prisma.prismaStore(client, { reads });
  const t = initTRPC.context<Context>().create({ transformer });
  const router = t.router({
    createPayment: t.procedure
      .input(z.object({ amount: z.string(), currency: z.string().length(3) }))
      .use(idempotency({ store, scope: ({ ctx }) => ctx.userId }))
      .mutation(({ ctx, input }) => insertPayment(ctx.tx as Tx, ctx.userId, input)),
  });
  const trpc = createHTTPServer({
    router,
    createContext: ({ req }) => ({
      req: req as Context['req'],
      userId: String(req.headers['x-user-id'] ?? ''),
    }),
  });
  const schema = createSchema<{ userId: string; tx?: Tx }>({
    typeDefs: /* GraphQL */ `
      type Payment { id: Int! amount: String! currency: String! createdAt: String! }
      input PaymentInput { amount: String! currency: String! }
      type Query { ok: Boolean! }
      type Mutation { createPayment(input: PaymentInput!, idempotencyKey: String): Payment! }
    `,
    resolvers: {
      Query: { ok: () => true },
      Mutation: {
        createPayment: (_, { input }: { input: PaymentInput }, { tx, userId }) =>
          insertPayment(tx!, userId, input),
      },
      Payment: {
        amount: (payment: { amount: { toFixed(digits: number): string } }) => payment.amount.toFixed(2),
        createdAt: (payment: { createdAt: Date }) => payment.createdAt.toISOString(),
      },
    },
  });
  const yoga = createServer(
    createYoga({
      schema,
      logging: false,
      landingPage: false,
      context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
      plugins: [useIdempotency({ store, scope: (context: { userId: string }) => context.userId })],
    }),
  );
  const servers: Server[] = [trpc, yoga];
  const [trpcUrl, yogaUrl] = await Promise.all(servers.map(listen));
  // The bench's client, typed for the bench's router: this router's procedure is called by its path.
  const trpcCall = trpcClient(trpcUrl!) as unknown as {
    createPayment: { mutate(input: PaymentInput, options: { context: object }): Promise<unknown> };
  };
  const userId = `versus-http-${randomUUID()}`;
  const input: PaymentInput = { amount: '9.99', currency: 'EUR' };
  return {
    trpc: () => trpcCall.createPayment.mutate(input, { context: { userId, key: randomUUID(), attempt: 1 } }),
    yoga: () => graphqlPayment(`${yogaUrl}/graphql`, { userId, key: randomUUID(), attempt: 1 }, input),
    async close() {
      for (const server of servers) server.closeAllConnections();
      await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
      await client.payment.deleteMany({ where: { userId } });
      await client.idempotencyRecord.deleteMany({ where: { scope: userId } });
      await client.$disconnect();
      await reads.dispose();
    },
  };
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

await prepareDatabase({ name: 'PostgreSQL', url, aliases: [] });
const sides = { tree: await sideOf(path.resolve('src')), [commit]: await sideOf(src) };
const loadAtStart = os.loadavg()[0]!;
const started = performance.now();
try {
  console.log(`a fresh key over loopback HTTP, PostgreSQL: this tree against ${commit}, ${PAIRS} pairs each`);
  for (const kind of ['trpc', 'yoga'] as const) {
    const times = await interleave(
      { tree: sides.tree[kind], [commit]: sides[commit]![kind] },
      { warmup: WARMUP, rounds: PAIRS },
    );
    console.log(`  ${kind === 'trpc' ? 'tRPC' : 'Yoga'}: ${comparedTimes(times, commit)}`);
  }
  console.log(
    `npm run bench:versus-http -- ${revision}, ${new Date().toISOString()}, node ${process.version}, load average ${loadAtStart.toFixed(1)} → ${os.loadavg()[0]!.toFixed(1)}, ${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
} finally {
  for (const side of Object.values(sides)) await side.close();
  remove();
}
