import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrderServer } from '../../examples/yoga-orders/app.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';
import { type GraphQLRequest, idempotencyOf, listen, postGraphQL } from './graphql-client.js';

/** The README's server, over a real HTTP connection. */
describeEachDatabase('The README Yoga server', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let server: Awaited<ReturnType<typeof listen>>;

  beforeAll(async () => {
    prisma = await connect(db);
    server = await listen(createOrderServer(prisma));
  });
  afterAll(async () => {
    await server?.close();
    await prisma?.$disconnect();
  });

  const send = (request: GraphQLRequest) => postGraphQL(fetch, server.url, request);
  const ordersOf = (userId: string) => prisma.order.count({ where: { userId } });
  const recordsOf = (userId: string) => prisma.idempotencyRecord.findMany({ where: { scope: userId } });

  const createOrder = /* GraphQL */ `
    mutation CreateOrder($input: OrderInput!, $key: String) {
      createOrder(input: $input, idempotencyKey: $key) { id sku quantity total }
    }
  `;

  it('runs a retried createOrder once: one order row, identical data, the retry marked replayed', async () => {
    const userId = uniqueScope();
    const request = {
      query: createOrder,
      variables: { input: { sku: 'BOOK-1', quantity: 3, unitPrice: '12.50' }, key: 'order-1' },
      userId,
    };
    const first = await send(request);
    const retry = await send(request);

    expect(first.status).toBe(200);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data).toEqual({
      createOrder: { id: expect.any(Number), sku: 'BOOK-1', quantity: 3, total: '37.50' },
    });
    expect(retry.body.data).toEqual(first.body.data);
    expect(idempotencyOf(first, 'createOrder')).toMatchObject({ key: 'order-1', replayed: false });
    expect(idempotencyOf(retry, 'createOrder')).toEqual({
      ...idempotencyOf(first, 'createOrder'),
      replayed: true,
    });
    expect(Object.keys(retry.body.extensions?.idempotency ?? {})).toEqual(['createOrder']);
    expect(await ordersOf(userId)).toBe(1);
    expect(await recordsOf(userId)).toMatchObject([{ key: 'order-1', operation: 'Mutation.createOrder' }]);
  });

  it('keeps a record per idempotent root field of one mutation', async () => {
    const userId = uniqueScope();
    const query = /* GraphQL */ `
      mutation {
        first: createOrder(input: { sku: "A", unitPrice: "1" }, idempotencyKey: "key-a") { id sku }
        second: createOrder(input: { sku: "B", unitPrice: "2" }, idempotencyKey: "key-b") { id sku }
      }
    `;
    const first = await send({ query, userId });
    const retry = await send({ query, userId });

    expect(first.body.data).toMatchObject({ first: { sku: 'A' }, second: { sku: 'B' } });
    expect(retry.body.data).toEqual(first.body.data);
    expect(retry.body.extensions?.idempotency).toMatchObject({
      first: { key: 'key-a', replayed: true },
      second: { key: 'key-b', replayed: true },
    });
    expect(await ordersOf(userId)).toBe(2);
    expect((await recordsOf(userId)).map((r) => r.key).sort()).toEqual(['key-a', 'key-b']);
  });

  it('50 concurrent identical mutations write one order and all answer the same data', async () => {
    const userId = uniqueScope();
    const request = {
      query: createOrder,
      variables: { input: { sku: 'STORM', unitPrice: '9.99' }, key: 'storm' },
      userId,
    };
    const responses = await Promise.all(Array.from({ length: 50 }, () => send(request)));

    expect(responses.map((r) => r.status)).toEqual(Array(50).fill(200));
    for (const response of responses) expect(response.body.data).toEqual(responses[0]!.body.data);
    const replays = responses.map((r) => idempotencyOf(r, 'createOrder')?.replayed);
    expect(replays.filter((replayed) => !replayed)).toHaveLength(1);
    expect(await ordersOf(userId)).toBe(1);
  });

  it('hashes variables and the same inline literal alike: the literal replays, no mismatch', async () => {
    const userId = uniqueScope();
    const withVariables = await send({
      query: createOrder,
      variables: { input: { sku: 'PEN', quantity: 1, unitPrice: '2.00' }, key: 'same' },
      userId,
    });
    // Inline, with `quantity` left to its default (1) and the members in another order.
    const inline = await send({
      query: /* GraphQL */ `mutation {
        createOrder(idempotencyKey: "same", input: { unitPrice: "2.00", sku: "PEN" }) { id sku quantity total }
      }`,
      userId,
    });

    expect(inline.body.errors).toBeUndefined();
    expect(inline.body.data).toEqual(withVariables.body.data);
    expect(inline.body.extensions?.idempotency).toMatchObject({ createOrder: { replayed: true } });
    expect(await ordersOf(userId)).toBe(1);
  });

  it('accepts the key as an Idempotency-Key header, for the whole operation', async () => {
    const userId = uniqueScope();
    const key = randomUUID();
    const request = {
      query: createOrder,
      variables: { input: { sku: 'MUG', quantity: 2, unitPrice: '4.25' } },
      userId,
      idempotencyKey: `"${key}"`,
    };
    const first = await send(request);
    const retry = await send({ ...request, idempotencyKey: key }); // the bare form is the same key

    expect(first.body.data).toMatchObject({ createOrder: { sku: 'MUG', total: '8.50' } });
    expect(retry.body.data).toEqual(first.body.data);
    expect(first.body.extensions?.idempotency).toMatchObject({ key, replayed: false });
    expect(retry.body.extensions?.idempotency).toMatchObject({ key, replayed: true });
    expect(await ordersOf(userId)).toBe(1);
    expect(await recordsOf(userId)).toMatchObject([{ key, operation: 'mutation CreateOrder' }]);
  });

  it('rejects a key reused with another input: 422 and IDEMPOTENCY_KEY_MISMATCH, the order untouched', async () => {
    const userId = uniqueScope();
    const order = (quantity: number) =>
      send({
        query: createOrder,
        variables: { input: { sku: 'X', quantity, unitPrice: '1' }, key: 'k' },
        userId,
      });
    const first = await order(1);
    const mismatch = await order(5);

    expect(mismatch.status).toBe(422);
    expect(mismatch.body.data).toBeNull();
    expect(mismatch.body.errors).toMatchObject([
      { path: ['createOrder'], extensions: { code: 'IDEMPOTENCY_KEY_MISMATCH' } },
    ]);
    expect((await order(1)).body.data).toEqual(first.body.data);
    expect(await ordersOf(userId)).toBe(1);
  });

  it('leaves queries alone, even with an Idempotency-Key header', async () => {
    const userId = uniqueScope();
    const query = { query: '{ orderCount }', userId, idempotencyKey: 'not-for-queries' };
    const response = await send(query);

    expect(response.body).toEqual({ data: { orderCount: 0 } });
    expect(await recordsOf(userId)).toEqual([]);
  });
});
