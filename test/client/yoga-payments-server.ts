import { createServer } from 'node:http';
import { createSchema, createYoga, type YogaInitialContext } from 'graphql-yoga';
import { useIdempotency } from '../../src/envelop/index.js';
import { listen } from '../helpers/listen.js';
import { type PaymentInput, type PaymentsBackend, scopeOf, WAIT_TIMEOUT_MS } from './payments.js';

const typeDefs = /* GraphQL */ `
  type Payment {
    id: Int!
    amount: String!
    currency: String!
    createdAt: String!
  }
  type Query {
    paymentCount: Int!
  }
  type Mutation {
    createPayment(amount: String!, currency: String!): Payment!
  }
`;

interface Context extends YogaInitialContext {
  userId: string;
  /** Set by the plugin when the operation carries an `Idempotency-Key` header. */
  tx: Parameters<PaymentsBackend['writePayment']>[0];
}

/**
 * A Yoga server whose mutations go through the library's `useIdempotency()` plugin: with an
 * `Idempotency-Key` header, the whole operation runs once and is replayed verbatim.
 */
export async function startYogaServer(backend: PaymentsBackend) {
  const yoga = createYoga({
    schema: createSchema<Context>({
      typeDefs,
      resolvers: {
        Query: {
          paymentCount: (_, __, { userId }) => backend.prisma.payment.count({ where: { userId } }),
        },
        Mutation: {
          createPayment: async (_, args: PaymentInput, { tx, userId }) => {
            const payment = await backend.writePayment(tx, userId, { ...args });
            return { ...payment, createdAt: payment.createdAt.toISOString() };
          },
        },
      },
    }),
    context: ({ request }) => ({ userId: scopeOf(request.headers.get('authorization')) }),
    plugins: [
      useIdempotency({
        store: backend.store,
        scope: (context: Context) => context.userId,
        waitTimeoutMs: WAIT_TIMEOUT_MS,
        retryAfterMs: 1_000,
      }),
    ],
    logging: false,
  });
  const { url, close } = await listen(createServer(yoga));
  return { url: `${url}/graphql`, close };
}
