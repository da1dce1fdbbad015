// A GraphQL app with no tRPC package installed: Yoga with useIdempotency on the server,
// idempotentFetch (from idempotent-mutations/client/fetch) on the client.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createSchema, createYoga } from 'graphql-yoga';
import { createCharge } from './client.js';
import { idempotencyPlugin } from './plugin.js';

let charges = 0;
const yoga = createYoga({
  schema: createSchema({
    typeDefs: /* GraphQL */ `
      type Query {
        charges: Int!
      }
      type Mutation {
        charge(amount: String!): String!
      }
    `,
    resolvers: {
      Query: { charges: () => charges },
      Mutation: { charge: (_, { amount }: { amount: string }) => `charge ${++charges}: ${amount}` },
    },
  }),
  plugins: [idempotencyPlugin],
});
const server = createServer(yoga).listen(0);
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/graphql`;

// Two calls with one key, as a retry after a lost response sends it.
const charge = createCharge(url, () => 'key-1');
const first = await charge('5.00');
const retry = await charge('5.00');
console.log({ first: first.data, retry: retry.data, replayed: retry.extensions.idempotency.replayed });
server.close();

const trpcClient: string = '@trpc/client'; // not a literal: TypeScript must not look for it either
const trpcInstalled = await import(trpcClient).then(
  () => true,
  () => false,
);
if (trpcInstalled) throw new Error('@trpc/client is installed: this consumer must run without it');
if (charges !== 1 || retry.data.charge !== first.data.charge || !retry.extensions.idempotency.replayed) {
  throw new Error('the retry was not replayed');
}
console.log('replayed without tRPC: one charge for two calls');
