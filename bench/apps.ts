// The servers the benchmark calls over loopback HTTP, all around the same handler: one payment
// inserted in an interactive transaction.
//
// - tRPC (standalone adapter): `plain` (the handler in `prisma.$transaction`, no middleware),
//   `plainNoTx` (the insert alone, no transaction), `idempotent` (the same insert behind
//   `idempotency()`), and the peers wrapping `plain`'s handler (Powertools also with its local cache).
// - GraphQL Yoga: two servers with the same schema, one without `useIdempotency()` (its resolver
//   opens the transaction itself) and one with it (its resolver writes through `context.tx`).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Decimal } from '@prisma/client/runtime/client';
import { createTRPCClient, httpLink } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { createSchema, createYoga } from 'graphql-yoga';
import { superjsonSerializer } from 'idempotent-mutations';
import { useIdempotency } from 'idempotent-mutations/envelop';
import { type PrismaStore, type PrismaStoreOptions, prismaStore } from 'idempotent-mutations/prisma';
import { idempotency } from 'idempotent-mutations/trpc';
import { SuperJSON } from 'superjson';
import { z } from 'zod';
import { type AdapterQueries, queryableOf } from '#internal/prisma/adapter-queryable.js';
import { type Provider, providerOf } from '#internal/prisma/client.js';
import { openTransaction, sendsInOrder } from '#internal/prisma/direct-statements.js';
import { type RecordStatements, recordStatements } from '#internal/prisma/record-sql.js';
import { type Sql, textFor } from '#internal/prisma/sql.js';
import type { BenchPrismaClient } from './databases.js';
import type { PeerHandler, Peers } from './peers.js';

/** What `createPayment` takes. */
export interface PaymentInput {
  amount: string;
  currency: string;
}

type Transaction = Parameters<Parameters<BenchPrismaClient['$transaction']>[0]>[0];

/** The mutation every scenario runs: one insert. */
export function insertPayment(db: Pick<Transaction, 'payment'>, userId: string, input: PaymentInput) {
  return db.payment.create({
    data: { userId, amount: new Decimal(input.amount), currency: input.currency },
  });
}

/** The handler without idempotency: the insert in an interactive transaction of its own. */
export function plainPayment(prisma: BenchPrismaClient, userId: string, input: PaymentInput) {
  return prisma.$transaction((tx) => insertPayment(tx, userId, input));
}

/**
 * The plain handler with one more statement in its transaction: what one statement inside a Prisma
 * interactive transaction costs, the unit a fresh key's overhead is counted in.
 */
export function plainPaymentAndSelect(prisma: BenchPrismaClient, userId: string, input: PaymentInput) {
  return prisma.$transaction(async (tx) => {
    await tx.$queryRawUnsafe('SELECT 1');
    return insertPayment(tx, userId, input);
  });
}

/**
 * The floor of a fresh key: plain's transaction with the two statements that make the record commit
 * with the mutation, the claim before the insert and the result after it, written by hand: the
 * store's own SQL, sent past the client as the store sends it (`directStatements`; on PostgreSQL the
 * result rides with `COMMIT`, read once the transaction committed), and nothing else (no fingerprint,
 * no checks, `JSON.stringify` for the result). Any design that commits the record with the mutation
 * sends these two; what a fresh key costs beyond this is the library's.
 */
export async function floorPayment(
  prisma: BenchPrismaClient,
  userId: string,
  key: string,
  input: PaymentInput,
) {
  const provider = providerOf(prisma);
  const statements = statementsOf(provider);
  const scope = userId;
  let completed: Promise<unknown> | undefined;
  const payment = await openTransaction((opening, begun) =>
    prisma.$transaction(async (tx) => {
      begun();
      const own = opening.direct ? queryableOf(opening.direct) : tx;
      const rows = ({ text, values }: Sql) =>
        own.$queryRawUnsafe<unknown[]>(textFor(provider, text), ...values);
      const changes = ({ text, values }: Sql) => own.$executeRawUnsafe(textFor(provider, text), ...values);
      const claimed = await rows(
        statements.claim({ scope, key, operation: 'createPayment', fingerprint: FINGERPRINT, ttlMs: DAY_MS }),
      );
      if (claimed.length !== 1) throw new Error(`The floor's key ${key} was not fresh`);
      const payment = await insertPayment(tx, userId, input);
      const result = JSON.stringify(payment);
      // As the store does: with the statement's own RETURNING where it has one (not MySQL's UPDATE).
      const complete = statements.complete({ scope, key, result, resultIsError: false, ttlMs: DAY_MS });
      const sent = Promise.resolve(
        statements.returningUpdates || complete.text.startsWith('INSERT')
          ? rows(complete)
          : changes(complete),
      );
      sent.catch(() => undefined); // awaited below
      completed = sent;
      if (!sendsInOrder(opening, provider)) await sent;
      // As the store does: Prisma's COMMIT is refused until the work says it ended.
      opening.workEnded?.();
      return payment;
    }),
  );
  await completed;
  return payment;
}

/**
 * The floor of a replay: the record's one read, as the store sends it through its `reads` adapter,
 * and the stored text read back as the store reads it (its Date and Decimal revived: the Redis peers
 * give theirs back as strings). No key, scope or fingerprint check.
 */
export async function floorReplay(reads: AdapterQueries, provider: Provider, userId: string, key: string) {
  const { text, values } = statementsOf(provider).find(userId, key);
  const [row] = await queryableOf(reads).$queryRawUnsafe<{ result: string }[]>(
    textFor(provider, text),
    ...values,
  );
  if (!row) throw new Error(`The floor's replay of ${key} found no record`);
  return storedValue.deserialize(row.result);
}

/** The store's statements for `provider`, built once as the store builds them once. */
function statementsOf(provider: Provider): RecordStatements {
  let statements = floorStatements.get(provider);
  if (statements === undefined) {
    statements = recordStatements(provider);
    floorStatements.set(provider, statements);
  }
  return statements;
}
const floorStatements = new Map<Provider, RecordStatements>();

/** The store's serializer, as `prismaStore` builds it by default. */
const storedValue = superjsonSerializer({ Decimal });

const DAY_MS = 86_400_000;
/** A sha256 in hex, as the store writes one: the floor computes none. */
const FINGERPRINT = 'f'.repeat(64);

/** superjson with Prisma's Decimal, on both ends of the tRPC wire. */
export const transformer = new SuperJSON();
transformer.registerCustom<Decimal, string>(
  {
    isApplicable: (value): value is Decimal => Decimal.isDecimal(value),
    serialize: (value) => value.toJSON(),
    deserialize: (text) => new Decimal(text),
  },
  'decimal.js',
);

interface Context {
  req: { headers: Record<string, string | string[] | undefined> };
  res: { setHeader(name: string, value: string): unknown };
  userId: string;
}

const t = initTRPC.context<Context>().create({ transformer });
const paymentInput = z.object({ amount: z.string(), currency: z.string().length(3) });

/** A payment made up in memory: what the framework costs without the database. */
export function echoPayment(userId: string, input: PaymentInput) {
  return {
    id: 0,
    userId,
    amount: new Decimal(input.amount),
    currency: input.currency,
    createdAt: new Date(),
  };
}

function createRouter(
  prisma: BenchPrismaClient,
  store: PrismaStore<Transaction>,
  storeOptions: PrismaStoreOptions,
  peers: Peers,
) {
  const cachedStore = prismaStore(prisma, { ...storeOptions, localCache: { max: 10_000 } });
  const { reads } = storeOptions;
  if (!reads) throw new TypeError("The bench servers need the store's reads adapter");
  const handler: PeerHandler<PaymentInput, unknown> = ({ userId, input }) =>
    plainPayment(prisma, userId, input);
  const powertools = peers.powertools(handler);
  const powertoolsCached = peers.powertools(handler, { cached: true });
  const nodeIdempotency = peers.nodeIdempotency(handler);
  const keyOf = (ctx: Context) => String(ctx.req.headers['idempotency-key']);

  return t.router({
    echo: t.procedure.input(paymentInput).mutation(({ ctx, input }) => echoPayment(ctx.userId, input)),
    plain: t.procedure
      .input(paymentInput)
      .mutation(({ ctx, input }) => plainPayment(prisma, ctx.userId, input)),
    plainNoTx: t.procedure
      .input(paymentInput)
      .mutation(({ ctx, input }) => insertPayment(prisma, ctx.userId, input)),
    floor: t.procedure
      .input(paymentInput)
      .mutation(({ ctx, input }) => floorPayment(prisma, ctx.userId, keyOf(ctx), input)),
    floorReplay: t.procedure
      .input(paymentInput)
      .mutation(({ ctx }) => floorReplay(reads, providerOf(prisma), ctx.userId, keyOf(ctx))),
    idempotent: t.procedure
      .input(paymentInput)
      .use(idempotency({ store, scope: ({ ctx }) => ctx.userId }))
      .mutation(({ ctx, input }) => insertPayment(ctx.tx, ctx.userId, input)),
    idempotentCached: t.procedure
      .input(paymentInput)
      .use(idempotency({ store: cachedStore, scope: ({ ctx }) => ctx.userId }))
      .mutation(({ ctx, input }) => insertPayment(ctx.tx, ctx.userId, input)),
    powertools: t.procedure
      .input(paymentInput)
      .mutation(({ ctx, input }) => powertools({ userId: ctx.userId, key: keyOf(ctx), input })),
    powertoolsCached: t.procedure
      .input(paymentInput)
      .mutation(({ ctx, input }) => powertoolsCached({ userId: ctx.userId, key: keyOf(ctx), input })),
    nodeIdempotency: t.procedure
      .input(paymentInput)
      .mutation(({ ctx, input }) => nodeIdempotency({ userId: ctx.userId, key: keyOf(ctx), input })),
  });
}

/** The bench's tRPC router. */
export type BenchRouter = ReturnType<typeof createRouter>;

const typeDefs = /* GraphQL */ `
  type Payment {
    id: Int!
    amount: String!
    currency: String!
    createdAt: String!
  }
  input PaymentInput {
    amount: String!
    currency: String!
  }
  type Query {
    ok: Boolean!
  }
  type Mutation {
    createPayment(input: PaymentInput!, idempotencyKey: String): Payment!
    createPaymentFloor(input: PaymentInput!, key: String!): Payment!
    echoPayment(input: PaymentInput!): Payment!
  }
`;

interface GraphQLContext {
  userId: string;
  tx?: Transaction;
}

function createYogaServer(prisma: BenchPrismaClient, store: PrismaStore<Transaction> | undefined) {
  const schema = createSchema<GraphQLContext>({
    typeDefs,
    resolvers: {
      Query: { ok: () => true },
      Mutation: {
        createPayment: (_, { input }: { input: PaymentInput }, { tx, userId }) =>
          store ? insertPayment(tx!, userId, input) : plainPayment(prisma, userId, input),
        createPaymentFloor: (_, { input, key }: { input: PaymentInput; key: string }, { userId }) =>
          floorPayment(prisma, userId, key, input),
        echoPayment: (_, { input }: { input: PaymentInput }, { userId }) => echoPayment(userId, input),
      },
      Payment: {
        amount: (payment: { amount: Decimal }) => payment.amount.toFixed(2),
        createdAt: (payment: { createdAt: Date }) => payment.createdAt.toISOString(),
      },
    },
  });
  return createYoga({
    schema,
    logging: false,
    landingPage: false,
    context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
    plugins: store ? [useIdempotency({ store, scope: (context: GraphQLContext) => context.userId })] : [],
  });
}

/** The running servers: where to reach them, and how to stop them. */
export interface BenchServers {
  trpcUrl: string;
  yogaPlainUrl: string;
  yogaIdempotentUrl: string;
  close(): Promise<void>;
}

/** Starts the tRPC server and both Yoga servers on free loopback ports; ours with `storeOptions`. */
export async function startServers(
  prisma: BenchPrismaClient,
  peers: Peers,
  storeOptions: PrismaStoreOptions,
): Promise<BenchServers> {
  const store = prismaStore(prisma, storeOptions);
  const trpc = createHTTPServer({
    router: createRouter(prisma, store, storeOptions, peers),
    createContext: ({ req, res }) => ({
      req: req as Context['req'],
      res,
      userId: String(req.headers['x-user-id'] ?? ''),
    }),
  });
  const yogaPlain = createServer(createYogaServer(prisma, undefined));
  const yogaIdempotent = createServer(createYogaServer(prisma, store));
  const servers = [trpc, yogaPlain, yogaIdempotent];
  const [trpcUrl, yogaPlainUrl, yogaIdempotentUrl] = await Promise.all(servers.map(listen));
  return {
    trpcUrl: trpcUrl!,
    yogaPlainUrl: `${yogaPlainUrl}/graphql`,
    yogaIdempotentUrl: `${yogaIdempotentUrl}/graphql`,
    async close() {
      await Promise.all(servers.map(close));
    },
  };
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())));
}

/** Who calls, and with which key; no key calls the plain procedure's way. */
export interface CallContext {
  userId: string;
  key?: string;
  /** Sent as `Idempotency-Attempt` when set. */
  attempt?: number | undefined;
}

/** A tRPC client over HTTP, one request per call; `onReplayed` sees the replay header. */
export function trpcClient(url: string, onResponse?: (headers: Headers) => void) {
  return createTRPCClient<BenchRouter>({
    links: [
      httpLink({
        url,
        transformer,
        headers: ({ op }) => {
          const { userId, key, attempt } = op.context as unknown as CallContext;
          return {
            'x-user-id': userId,
            ...(key === undefined ? {} : { 'idempotency-key': key }),
            ...(attempt === undefined ? {} : { 'idempotency-attempt': String(attempt) }),
          };
        },
        fetch: async (input, init) => {
          const response = await fetch(input, init as RequestInit);
          onResponse?.(response.headers);
          return response;
        },
      }),
    ],
  });
}

const mutations = {
  createPayment: /* GraphQL */ `
    mutation CreatePayment($input: PaymentInput!, $key: String) {
      createPayment(input: $input, idempotencyKey: $key) {
        id
        amount
        currency
        createdAt
      }
    }
  `,
  createPaymentFloor: /* GraphQL */ `
    mutation CreatePaymentFloor($input: PaymentInput!, $key: String!) {
      createPaymentFloor(input: $input, key: $key) {
        id
        amount
        currency
        createdAt
      }
    }
  `,
  echoPayment: /* GraphQL */ `
    mutation EchoPayment($input: PaymentInput!) {
      echoPayment(input: $input) {
        id
        amount
        currency
        createdAt
      }
    }
  `,
};

/** What a GraphQL call answered: the payment, and whether it was a replay. */
export interface GraphQLPayment {
  payment: { id: number; amount: string; currency: string; createdAt: string };
  replayed: boolean | undefined;
}

/** Calls `createPayment` over HTTP; any GraphQL error throws, so a failed call is never timed as a fast one. */
export async function graphqlPayment(
  url: string,
  { userId, key, attempt }: CallContext,
  input: PaymentInput,
  mutation: keyof typeof mutations = 'createPayment',
): Promise<GraphQLPayment> {
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/graphql-response+json',
      'x-user-id': userId,
      ...(attempt === undefined ? {} : { 'idempotency-attempt': String(attempt) }),
    },
    body: JSON.stringify({ query: mutations[mutation], variables: { input, key } }),
  });
  const body = (await response.json()) as {
    data?: Record<string, GraphQLPayment['payment']> | null;
    errors?: { message: string }[];
    extensions?: { idempotency?: { createPayment?: { replayed: boolean } } };
  };
  if (!response.ok || body.errors?.length || !body.data) {
    throw new Error(`GraphQL call failed (${response.status}): ${JSON.stringify(body.errors)}`);
  }
  return {
    payment: body.data[mutation]!,
    replayed: body.extensions?.idempotency?.createPayment?.replayed,
  };
}
