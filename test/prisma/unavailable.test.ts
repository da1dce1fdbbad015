import { afterAll, describe, expect, it } from 'vitest';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import { IdempotencyStoreUnavailableError, runIdempotent } from '../../src/index.js';
import { adapterForUrl, prismaStore } from '../../src/prisma/index.js';

// Nothing listens on port 1: these run everywhere, no database server needed.
describe.each([
  ['PostgreSQL', PostgresClient, 'postgresql://postgres@127.0.0.1:1/test'],
  ['MariaDB', MysqlClient, 'mysql://root@127.0.0.1:1/test?connectTimeout=500&acquireTimeout=1000'],
])('an unreachable %s', (_name, Client, url) => {
  const clients: { $disconnect(): Promise<void> }[] = [];
  afterAll(() => Promise.all(clients.map((c) => c.$disconnect().catch(() => undefined))));

  it('fails the mutation with IDEMPOTENCY_STORE_UNAVAILABLE and runs nothing', async () => {
    const prisma = new (Client as typeof PostgresClient)({ adapter: (await adapterForUrl(url)) as never });
    clients.push(prisma);
    let calls = 0;
    const error = await runIdempotent(
      { store: prismaStore(prisma), scope: 'u', key: 'k', operation: 'op', input: {} },
      async () => ++calls,
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect((error as IdempotencyStoreUnavailableError).code).toBe('IDEMPOTENCY_STORE_UNAVAILABLE');
    expect((error as IdempotencyStoreUnavailableError).status).toBe(503);
    expect(calls).toBe(0);
  });
});
