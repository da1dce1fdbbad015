import { type AddressInfo, createServer } from 'node:net';
import { PrismaPg } from '@prisma/adapter-pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import { IdempotencyStoreUnavailableError, runIdempotent } from '../../src/index.js';
import { adapterForUrl, prismaStore } from '../../src/prisma/index.js';
import { connectRecordedAdapter } from '../helpers/recorded-adapter.js';

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

  it('fails the mutation with IDEMPOTENCY_STORE_UNAVAILABLE when its read through the driver adapter fails', async () => {
    const prisma = new (Client as typeof PostgresClient)({ adapter: (await adapterForUrl(url)) as never });
    const adapter = await connectRecordedAdapter(url);
    clients.push(prisma, { $disconnect: () => adapter.reads.dispose() });
    let calls = 0;
    const error = await runIdempotent(
      {
        store: prismaStore(prisma, { reads: adapter.reads }),
        scope: 'u',
        key: 'k',
        operation: 'op',
        input: {},
      },
      async () => ++calls,
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect((error as IdempotencyStoreUnavailableError).code).toBe('IDEMPOTENCY_STORE_UNAVAILABLE');
    expect((error as IdempotencyStoreUnavailableError).status).toBe(503);
    // The client cannot reach the database either: the failure came through the adapter.
    expect(adapter.queries).toHaveLength(1);
    expect(calls).toBe(0);
  });
});

describe('a PostgreSQL server that accepts connections and never answers', () => {
  const silent = createServer(() => undefined);
  let prisma: InstanceType<typeof PostgresClient> | undefined;
  beforeAll(() => new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve)));
  afterAll(async () => {
    await prisma?.$disconnect().catch(() => undefined);
    silent.close();
  });

  it('fails the mutation with IDEMPOTENCY_STORE_UNAVAILABLE after the URL’s connect_timeout', async () => {
    const { port } = silent.address() as AddressInfo;
    const url = `postgresql://postgres@127.0.0.1:${port}/test?connect_timeout=1`;
    prisma = new PostgresClient({ adapter: (await adapterForUrl(url)) as never });
    let calls = 0;
    const started = Date.now();
    const error = await runIdempotent(
      { store: prismaStore(prisma), scope: 'u', key: 'k', operation: 'op', input: {} },
      async () => ++calls,
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    // The driver's words stay in the cause, for the server's logs; clients get ours alone.
    expect((error as Error).message).toBe('The idempotency store is unavailable');
    expect(messagesOf(error)).toMatch(/connection timeout/);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(calls).toBe(0);
  });

  it('fails the mutation with IDEMPOTENCY_STORE_UNAVAILABLE after 10 s when the URL sets no connect_timeout', async () => {
    const { port } = silent.address() as AddressInfo;
    const client = new PostgresClient({
      adapter: (await adapterForUrl(`postgresql://postgres@127.0.0.1:${port}/test`)) as never,
    });
    try {
      const started = Date.now();
      const error = await runIdempotent(
        { store: prismaStore(client), scope: 'u', key: 'k', operation: 'op', input: {} },
        async () => 1,
      ).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect(Date.now() - started).toBeGreaterThanOrEqual(9_900);
    } finally {
      await client.$disconnect().catch(() => undefined);
    }
  }, 20_000);
});

describe.runIf(process.env.TEST_POSTGRES_URL)('a PostgreSQL pool with no connection free', () => {
  it('fails a mutation with IDEMPOTENCY_STORE_UNAVAILABLE once the pool’s connectionTimeoutMillis has passed', async () => {
    const url = process.env.TEST_POSTGRES_URL!;
    const prisma = new PostgresClient({
      adapter: new PrismaPg({ connectionString: url, max: 1, connectionTimeoutMillis: 300 }),
    });
    let release!: () => void;
    const holding = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const held = new Promise<void>((resolve) => (started = resolve));
    // Holds the pool's only connection in a transaction until released.
    const holder = prisma.$transaction(async () => {
      started();
      await holding;
    });
    try {
      await held;
      let calls = 0;
      const error = await runIdempotent(
        { store: prismaStore(prisma), scope: 'u', key: 'k', operation: 'op', input: {} },
        async () => ++calls,
      ).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect(messagesOf(error)).toMatch(/timeout exceeded when trying to connect/);
      expect(calls).toBe(0);
    } finally {
      release();
      await holder;
      await prisma.$disconnect();
    }
  });
});

/** The messages of `error` and its causes, one after another. */
function messagesOf(error: unknown): string {
  return error instanceof Error ? `${error.message}\n${messagesOf(error.cause)}` : String(error ?? '');
}
