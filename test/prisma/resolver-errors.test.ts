import { afterAll, beforeAll, expect, it } from 'vitest';
import { IdempotencyStoreUnavailableError, runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

/** What Node's fetch throws when the payment gateway (not the store) refuses the connection. */
function gatewayDown() {
  const cause = Object.assign(new Error('connect ECONNREFUSED 10.0.0.7:443'), { code: 'ECONNREFUSED' });
  return new TypeError('fetch failed', { cause });
}

describeEachDatabase('a resolver error that wraps a connection error of its own', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma?.$disconnect());

  it('reaches the caller as the resolver threw it, not as IDEMPOTENCY_STORE_UNAVAILABLE', async () => {
    const store = prismaStore(prisma);
    const thrown = gatewayDown();
    const error = await runIdempotent(
      { store, scope: uniqueScope(), key: 'k', operation: 'payments.charge', input: {} },
      async () => {
        throw thrown;
      },
    ).catch((e: unknown) => e);
    expect(error).not.toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(error).toBe(thrown);
  });

  it('is offered to replayErrors and stored', async () => {
    const store = prismaStore(prisma);
    const scope = uniqueScope();
    let calls = 0;
    const run = () =>
      runIdempotent(
        {
          store,
          scope,
          key: 'k',
          operation: 'payments.charge',
          input: {},
          replayErrors: (e) => e instanceof TypeError,
        },
        async () => {
          calls++;
          throw gatewayDown();
        },
      ).catch((e: unknown) => e);
    await run();
    await run();
    expect(calls).toBe(1);
  });
});
