import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Prisma } from '../../generated/sqlite/client.js';
import { useIdempotency } from '../../src/envelop/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, uniqueScope } from '../helpers/databases.js';
import { describeEachServer, type WriteConflicts, writeConflicts } from '../helpers/write-conflicts.js';
import { type GraphQLRequest, idempotencyOf, postGraphQL } from './graphql-client.js';

type Client = Awaited<ReturnType<typeof connect>>;

const typeDefs = /* GraphQL */ `
  type Payment {
    id: Int!
    amount: String!
  }
  type Query {
    ping: Boolean
  }
  type Mutation {
    pay(amount: String!, marker: String!, idempotencyKey: String): Payment!
  }
`;

/**
 * A Yoga server whose `pay` writes a payment through `context.tx`, then a probe row that fails as
 * a write conflict while the marker's plan lasts.
 */
function createServer(prisma: Client, conflicts: WriteConflicts) {
  const runs = { pay: 0 };
  type Context = { userId: string; tx: Client };
  const schema = createSchema<Context>({
    typeDefs,
    resolvers: {
      Mutation: {
        pay: async (_, { amount, marker }: { amount: string; marker: string }, { tx, userId }) => {
          runs.pay++;
          const payment = await tx.payment.create({ data: { userId, amount, currency: 'EUR' } });
          await conflicts.probe(tx, marker);
          return payment;
        },
      },
      Payment: { amount: (row: { amount: Prisma.Decimal }) => row.amount.toFixed(2) },
    },
  });
  const yoga = createYoga({
    schema,
    logging: false,
    context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
    plugins: [useIdempotency({ store: prismaStore(prisma), scope: (context: Context) => context.userId })],
  });
  return { yoga, runs };
}

describeEachServer('useIdempotency retries a write conflict of the resolver’s own context.tx query', (db) => {
  let prisma: Client;
  let conflicts: WriteConflicts;
  let server: ReturnType<typeof createServer>;

  beforeAll(async () => {
    prisma = await connect(db);
    conflicts = await writeConflicts(prisma, db.provider);
    server = createServer(prisma, conflicts);
  });
  afterAll(() => prisma?.$disconnect());

  const send = (request: GraphQLRequest) =>
    postGraphQL((url, init) => Promise.resolve(server.yoga.fetch(url, init)), 'http://yoga/graphql', request);
  const paymentsOf = (userId: string) => prisma.payment.count({ where: { userId } });

  it('under a field key: runs the resolver again after two conflicts, answers once, one payment', async () => {
    const userId = uniqueScope();
    const marker = await conflicts.plan(2);
    const before = server.runs.pay;
    const request = {
      query: `mutation Pay($marker: String!) {
        pay(amount: "4.00", marker: $marker, idempotencyKey: "field-key") { id amount }
      }`,
      variables: { marker },
      userId,
    };
    const first = await send(request);
    const retry = await send(request);

    expect(first.body.errors).toBeUndefined();
    expect(first.body.data).toEqual({ pay: { id: expect.any(Number), amount: '4.00' } });
    expect(retry.body.data).toEqual(first.body.data);
    expect(idempotencyOf(retry, 'pay')).toMatchObject({ replayed: true });
    expect(server.runs.pay - before).toBe(3);
    expect(await paymentsOf(userId)).toBe(1);
  });

  it('under an Idempotency-Key header: runs the operation again after two conflicts, answers once, one payment', async () => {
    const userId = uniqueScope();
    const marker = await conflicts.plan(2);
    const before = server.runs.pay;
    const request = {
      query: 'mutation Pay($marker: String!) { pay(amount: "4.00", marker: $marker) { id amount } }',
      variables: { marker },
      userId,
      idempotencyKey: 'header-key',
    };
    const first = await send(request);
    const retry = await send(request);

    expect(first.body.errors).toBeUndefined();
    expect(first.body.data).toEqual({ pay: { id: expect.any(Number), amount: '4.00' } });
    expect(retry.body.data).toEqual(first.body.data);
    expect(idempotencyOf(retry)).toMatchObject({ replayed: true });
    expect(server.runs.pay - before).toBe(3);
    expect(await paymentsOf(userId)).toBe(1);
  });
});
