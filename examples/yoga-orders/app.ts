import { createSchema, createYoga, type YogaInitialContext } from 'graphql-yoga';
import type { IdempotencyEvent } from 'idempotent-mutations';
import { idempotentDirectiveTypeDefs, useIdempotency } from 'idempotent-mutations/envelop';
import { prismaStore } from 'idempotent-mutations/prisma';
import { Prisma, type PrismaClient } from '../../generated/sqlite/client.js';

interface Context extends YogaInitialContext {
  userId: string;
  /** The claim's transaction: writes through it commit together with the idempotency record. */
  tx: Prisma.TransactionClient;
}

const typeDefs = /* GraphQL */ `
  type Order {
    id: Int!
    sku: String!
    quantity: Int!
    total: String!
  }
  input OrderInput {
    sku: String!
    quantity: Int! = 1
    unitPrice: String!
  }
  type Query {
    orderCount: Int!
  }
  type Mutation {
    createOrder(input: OrderInput!, idempotencyKey: String): Order! @idempotent
  }
`;

export function createOrderServer(
  prisma: PrismaClient,
  { onEvent }: { onEvent?: (event: IdempotencyEvent) => void } = {},
) {
  const schema = createSchema<Context>({
    typeDefs: [idempotentDirectiveTypeDefs, typeDefs],
    resolvers: {
      Query: {
        orderCount: (_, __, { userId }) => prisma.order.count({ where: { userId } }),
      },
      Mutation: {
        // Runs once per (user, key); every retry gets the stored order back.
        createOrder: (_, { input }, { tx, userId }) =>
          tx.order.create({
            data: {
              userId,
              sku: input.sku,
              quantity: input.quantity,
              total: new Prisma.Decimal(input.unitPrice).mul(input.quantity),
            },
          }),
      },
      // Sub-selections resolve over the stored order, whose `total` is replayed as a Decimal.
      Order: { total: (order: { total: Prisma.Decimal }) => order.total.toFixed(2) },
    },
  });
  return createYoga({
    schema,
    context: ({ request }) => ({ userId: request.headers.get('x-user-id') ?? '' }),
    plugins: [
      useIdempotency({ store: prismaStore(prisma), scope: (context: Context) => context.userId, onEvent }),
    ],
  });
}
