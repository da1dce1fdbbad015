import { GraphQLError } from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Prisma } from '../../generated/sqlite/client.js';
import { idempotentDirectiveTypeDefs, useIdempotency } from '../../src/envelop/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { type GraphQLRequest, idempotencyOf, postGraphQL } from './graphql-client.js';

type Client = Awaited<ReturnType<typeof connect>>;
type Tx = Prisma.TransactionClient;

const typeDefs = /* GraphQL */ `
  type Order {
    id: Int!
    sku: String!
    total: String!
  }
  type Query {
    ping: Boolean
  }
  type Mutation {
    createOrder(sku: String!, total: String! = "1", idempotencyKey: String): Order!
    failingOrder(sku: String!, idempotencyKey: String): Order
    declinedOrder(sku: String!, idempotencyKey: String): Order @idempotent
    draftOrder(sku: String!, idempotencyKey: String): Order @idempotent(required: false, ttlMs: 60000)
    # Thirty days: past GraphQL's Int (about 24.8 days).
    monthlyDraft(sku: String!, idempotencyKey: String): Order @idempotent(ttlMs: 2592000000)
    failingDraft(sku: String!, idempotencyKey: String): Order @idempotent(required: false)
    plainOrder(sku: String!): Order!
    contextHasTx: Boolean!
  }
`;

/** A Yoga server over `prisma` whose resolvers count their calls and write orders of the caller. */
function createServer(prisma: Client) {
  const calls = { declinedOrder: 0 };
  const order = (tx: Tx | undefined, userId: string, sku: string, total = '1') =>
    (tx ?? prisma).order.create({ data: { userId, sku, quantity: 1, total: new Prisma.Decimal(total) } });
  type Context = { userId: string; tx?: Tx };
  type Args = { sku: string; total?: string };

  const schema = createSchema<Context>({
    typeDefs: [idempotentDirectiveTypeDefs, typeDefs],
    resolvers: {
      Mutation: {
        createOrder: (_: unknown, { sku, total }: Args, { tx, userId }: Context) =>
          order(tx, userId, sku, total),
        failingOrder: async (_: unknown, { sku }: Args, { tx, userId }: Context) => {
          await order(tx, userId, sku);
          throw new Error('out of stock');
        },
        declinedOrder: async (_: unknown, { sku }: Args, { tx, userId }: Context) => {
          calls.declinedOrder++;
          await order(tx, userId, sku);
          throw new GraphQLError('Card declined', { extensions: { code: 'CARD_DECLINED' } });
        },
        monthlyDraft: (_: unknown, { sku }: Args, { tx, userId }: Context) => order(tx, userId, sku),
        // Through context.tx alone, keyed or not.
        draftOrder: (_: unknown, { sku }: Args, { tx, userId }: Context) =>
          tx!.order.create({ data: { userId, sku, quantity: 1, total: new Prisma.Decimal(1) } }),
        failingDraft: async (_: unknown, { sku }: Args, { tx, userId }: Context) => {
          await tx!.order.create({ data: { userId, sku, quantity: 1, total: new Prisma.Decimal(1) } });
          throw new Error('out of stock');
        },
        plainOrder: (_: unknown, { sku }: Args, { tx, userId }: Context) => order(tx, userId, sku),
        contextHasTx: (_: unknown, __: unknown, context: Context) => 'tx' in context,
      },
      Order: { total: (row: { total: Prisma.Decimal }) => row.total.toFixed(2) },
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
        replayErrors: (error) => error instanceof GraphQLError && error.extensions.code === 'CARD_DECLINED',
      }),
    ],
  });
  return { yoga, calls };
}

describeEachDatabase('useIdempotency with yoga.fetch', (db) => {
  let prisma: Client;
  let server: ReturnType<typeof createServer>;

  beforeAll(async () => {
    prisma = await connect(db);
    server = createServer(prisma);
  });
  afterAll(() => prisma?.$disconnect());

  const send = (request: GraphQLRequest) =>
    postGraphQL((url, init) => Promise.resolve(server.yoga.fetch(url, init)), 'http://yoga/graphql', request);
  const ordersOf = (userId: string) => prisma.order.count({ where: { userId } });
  const recordsOf = (userId: string) => prisma.idempotencyRecord.findMany({ where: { scope: userId } });

  it('a resolver that throws leaves no order and no record, so the key can be used again', async () => {
    const userId = uniqueScope();
    const failed = await send({
      query: 'mutation { failingOrder(sku: "A", idempotencyKey: "k") { id } }',
      userId,
    });

    expect(failed.body.data).toEqual({ failingOrder: null });
    expect(failed.body.errors).toHaveLength(1);
    expect(await ordersOf(userId)).toBe(0);
    expect(await recordsOf(userId)).toEqual([]);

    const next = await send({
      query: 'mutation { createOrder(sku: "A", idempotencyKey: "k") { sku } }',
      userId,
    });
    expect(next.body.data).toEqual({ createOrder: { sku: 'A' } });
    expect(await ordersOf(userId)).toBe(1);
  });

  it('replays an error that replayErrors accepts, extensions intact, without running the resolver again', async () => {
    const userId = uniqueScope();
    const request = { query: 'mutation { declinedOrder(sku: "A", idempotencyKey: "card") { id } }', userId };
    const before = server.calls.declinedOrder;
    const first = await send(request);
    const retry = await send(request);

    for (const response of [first, retry]) {
      expect(response.body.data).toEqual({ declinedOrder: null });
      expect(response.body.errors).toMatchObject([
        { message: 'Card declined', path: ['declinedOrder'], extensions: { code: 'CARD_DECLINED' } },
      ]);
    }
    expect(server.calls.declinedOrder - before).toBe(1);
    expect(await ordersOf(userId)).toBe(0); // the order written before the error rolled back
    expect(await recordsOf(userId)).toMatchObject([{ key: 'card', resultIsError: true }]);
  });

  it('rejects a required key that is missing with 400 and IDEMPOTENCY_KEY_MISSING, running nothing', async () => {
    const userId = uniqueScope();
    const response = await send({ query: 'mutation { createOrder(sku: "A") { id } }', userId });

    expect(response.status).toBe(400);
    expect(response.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_MISSING' } }]);
    expect(await ordersOf(userId)).toBe(0);
  });

  it('runs a field with @idempotent(required: false) unrecorded when no key is sent, writing through context.tx', async () => {
    const userId = uniqueScope();
    const request = { query: 'mutation { draftOrder(sku: "A") { id } }', userId };
    await send(request);
    const second = await send(request);

    expect(second.body.errors).toBeUndefined();
    expect(second.body.data).toEqual({ draftOrder: { id: expect.any(Number) } });
    expect(second.body.extensions).toBeUndefined();
    expect(await ordersOf(userId)).toBe(2);
    expect(await recordsOf(userId)).toEqual([]);
  });

  it('runs a keyless call of an optional key in a transaction: a resolver error rolls its write back', async () => {
    const userId = uniqueScope();
    const response = await send({ query: 'mutation { failingDraft(sku: "A") { id } }', userId });

    expect(response.body.data).toEqual({ failingDraft: null });
    expect(response.body.errors).toHaveLength(1);
    expect(await ordersOf(userId)).toBe(0);
    expect(await recordsOf(userId)).toEqual([]);
  });

  it.each([
    ['the ttlMs of @idempotent(ttlMs:) for that field', 'draftOrder', 60_000],
    ['a ttlMs past the 24.8 days of GraphQL’s Int', 'monthlyDraft', 30 * 86_400_000],
  ])('keeps %s', async (_, field, ttlMs) => {
    const userId = uniqueScope();
    const response = await send({
      query: `mutation { ${field}(sku: "A", idempotencyKey: "t") { id } }`,
      userId,
    });
    const { firstSeenAt, expiresAt } = idempotencyOf(response, field)!;
    const ttl = Date.parse(expiresAt) - Date.parse(firstSeenAt);

    expect(ttl).toBeGreaterThanOrEqual(ttlMs);
    expect(ttl).toBeLessThan(ttlMs + 10_000);
  });

  it('gives the resolver a context of its own: the shared context never holds the transaction', async () => {
    const userId = uniqueScope();
    const response = await send({
      query: 'mutation { createOrder(sku: "A", idempotencyKey: "own") { sku } contextHasTx }',
      userId,
    });

    expect(response.body.data).toEqual({ createOrder: { sku: 'A' }, contextHasTx: false });
  });

  it('under an Idempotency-Key header runs the whole operation in one transaction and replays it verbatim', async () => {
    const userId = uniqueScope();
    const request = {
      query: /* GraphQL */ `mutation Checkout($sku: String!) {
        order: createOrder(sku: $sku, total: "19.90") { id sku total }
        gift: plainOrder(sku: "GIFT") { id sku }
        contextHasTx
      }`,
      variables: { sku: 'BIKE' },
      userId,
      idempotencyKey: 'checkout-1',
    };
    const first = await send(request);
    const retry = await send(request);

    expect(first.body.data).toMatchObject({
      order: { sku: 'BIKE', total: '19.90' },
      gift: { sku: 'GIFT' },
      contextHasTx: true, // the whole operation runs in the transaction
    });
    expect(retry.body).toEqual({
      ...first.body,
      extensions: { idempotency: { ...idempotencyOf(first), replayed: true } },
    });
    expect(await ordersOf(userId)).toBe(2);
    expect(await recordsOf(userId)).toMatchObject([{ key: 'checkout-1', operation: 'mutation Checkout' }]);
  });

  it('rolls back every field of a header-keyed operation when one fails: data null, no order, no record', async () => {
    const userId = uniqueScope();
    const response = await send({
      query: 'mutation { plainOrder(sku: "A") { id } failingOrder(sku: "B") { id } }',
      userId,
      idempotencyKey: 'all-or-nothing',
    });

    expect(response.body.data).toBeNull();
    expect(response.body.errors).toMatchObject([{ path: ['failingOrder'] }]);
    expect(await ordersOf(userId)).toBe(0);
    expect(await recordsOf(userId)).toEqual([]);
  });

  it('replays a header-keyed operation that failed with an error replayErrors accepts', async () => {
    const userId = uniqueScope();
    const request = {
      query: 'mutation { declinedOrder(sku: "A") { id } }',
      userId,
      idempotencyKey: 'declined-op',
    };
    const before = server.calls.declinedOrder;
    const first = await send(request);
    const retry = await send(request);

    for (const response of [first, retry]) {
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({
        data: null,
        errors: [
          { message: 'Card declined', path: ['declinedOrder'], extensions: { code: 'CARD_DECLINED' } },
        ],
      });
    }
    expect(server.calls.declinedOrder - before).toBe(1);
    expect(await ordersOf(userId)).toBe(0);
  });

  it('rejects a header and an idempotencyKey argument that disagree with 400, committing nothing', async () => {
    const userId = uniqueScope();
    const response = await send({
      query: 'mutation { createOrder(sku: "A", idempotencyKey: "arg-key") { id } }',
      userId,
      idempotencyKey: 'header-key',
    });

    expect(response.status).toBe(400);
    expect(response.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_INVALID' } }]);
    expect(await ordersOf(userId)).toBe(0);
    expect(await recordsOf(userId)).toEqual([]);
  });

  it.each([
    ['a list', 'a, b'],
    ['an sf-string with parameters', '"a";x=1'],
    ['control characters', 'bad\tkey'],
  ])('rejects an Idempotency-Key header holding %s with 400 before anything runs', async (_, header) => {
    const userId = uniqueScope();
    const response = await send({
      query: 'mutation { plainOrder(sku: "A") { id } }',
      userId,
      idempotencyKey: header,
    });

    expect(response.status).toBe(400);
    expect(response.body.errors).toMatchObject([{ extensions: { code: 'IDEMPOTENCY_KEY_INVALID' } }]);
    expect(await ordersOf(userId)).toBe(0);
  });
});
