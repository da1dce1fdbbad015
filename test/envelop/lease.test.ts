import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Prisma } from '../../generated/sqlite/client.js';
import { idempotentDirectiveTypeDefs, useIdempotency } from '../../src/envelop/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';
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
    charge(amount: String!, idempotencyKey: String): Payment! @idempotent(mode: LEASE, leaseMs: 5000)
    draftCharge(amount: String!, idempotencyKey: String): Payment @idempotent(required: false, mode: LEASE)
  }
`;

/** A promise and the function that settles it, to hold a resolver at a chosen point. */

/**
 * A Yoga server whose `charge` field is leased; the store and the plugin are transactional, and a
 * transactional duplicate would wait up to a minute for the holder.
 */
function createServer(prisma: Client) {
  const calls = { charge: 0, draftCharge: 0 };
  const state = { held: gate() };
  type Context = { userId: string; tx: Client };
  const pay = (tx: Client, userId: string, amount: string) =>
    tx.payment.create({ data: { userId, amount: new Prisma.Decimal(amount), currency: 'EUR' } });

  const schema = createSchema<Context>({
    typeDefs: [idempotentDirectiveTypeDefs, typeDefs],
    resolvers: {
      Mutation: {
        charge: async (_: unknown, { amount }: { amount: string }, { tx, userId }: Context) => {
          calls.charge++;
          const payment = await pay(tx, userId, amount);
          await state.held.opened;
          return payment;
        },
        draftCharge: async (_: unknown, { amount }: { amount: string }, { tx, userId }: Context) => {
          calls.draftCharge++;
          await pay(tx, userId, amount);
          throw new Error('gateway down');
        },
      },
      Payment: { amount: (row: { amount: Prisma.Decimal }) => row.amount.toFixed(2) },
    },
  });
  const yoga = createYoga({
    schema,
    logging: false,
    context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
    plugins: [
      useIdempotency({
        store: prismaStore(prisma),
        scope: (context: Context) => context.userId,
        waitTimeoutMs: 60_000,
      }),
    ],
  });
  return { yoga, calls, state };
}

describeEachDatabase('useIdempotency with @idempotent(mode: LEASE)', (db) => {
  let prisma: Client;
  /** A connection of its own: it sees only what has committed. */
  let observer: Client;
  let server: ReturnType<typeof createServer>;

  beforeAll(async () => {
    prisma = await connect(db);
    observer = await connect(db);
    server = createServer(prisma);
  });
  afterAll(async () => {
    await observer?.$disconnect();
    await prisma?.$disconnect();
  });

  const send = (request: GraphQLRequest) =>
    postGraphQL((url, init) => Promise.resolve(server.yoga.fetch(url, init)), 'http://yoga/graphql', request);
  const paymentsOf = (userId: string) => observer.payment.count({ where: { userId } });
  const recordsOf = (userId: string) => observer.idempotencyRecord.findMany({ where: { scope: userId } });

  it('makes a duplicate during the lease wait for the running call, runs once, then replays', async () => {
    const userId = uniqueScope();
    server.state.held = gate();
    const before = server.calls.charge;
    const request = {
      query: 'mutation { charge(amount: "9.99", idempotencyKey: "charge-1") { id amount } }',
      userId,
    };
    const first = send(request);

    // The resolver is still held, yet its write has committed: context.tx is no transaction.
    await expect.poll(() => paymentsOf(userId), { timeout: 10_000 }).toBe(1);
    const [record] = await recordsOf(userId);
    expect(record).toMatchObject({ status: 'IN_PROGRESS', operation: 'Mutation.charge' });
    // The directive's leaseMs, not the default 30 s.
    expect(record!.lockedUntil!.getTime() - record!.createdAt.getTime()).toBe(5_000);

    const waiting = send(request);
    await new Promise((resolve) => setTimeout(resolve, 50));
    server.state.held.open();
    const done = await first;
    expect(done.body.data).toEqual({ charge: { id: expect.any(Number), amount: '9.99' } });
    expect(idempotencyOf(done, 'charge')).toMatchObject({ key: 'charge-1', replayed: false });
    const duplicate = await waiting;
    expect(duplicate.body.data).toEqual(done.body.data);
    expect(idempotencyOf(duplicate, 'charge')).toMatchObject({ key: 'charge-1', replayed: true });
    const retry = await send(request);
    expect(retry.body.data).toEqual(done.body.data);
    expect(idempotencyOf(retry, 'charge')).toMatchObject({ key: 'charge-1', replayed: true });
    expect(server.calls.charge - before).toBe(1);
    expect(await paymentsOf(userId)).toBe(1);
    expect(await recordsOf(userId)).toMatchObject([{ status: 'COMPLETED', lockedUntil: null }]);
  });

  it('runs a keyless call of an optional leased field unrecorded, with the plain client as context.tx', async () => {
    const userId = uniqueScope();
    const before = server.calls.draftCharge;
    const response = await send({ query: 'mutation { draftCharge(amount: "2.00") { id } }', userId });

    expect(response.body).toMatchObject({ data: { draftCharge: null }, errors: [{ path: ['draftCharge'] }] });
    expect(server.calls.draftCharge - before).toBe(1);
    expect(await paymentsOf(userId)).toBe(1); // a transaction would have rolled it back
    expect(await recordsOf(userId)).toEqual([]);
  });
});
