import { afterAll, describe, expect, it } from 'vitest';
import { PrismaClient } from '../../generated/postgresql/client.js';
import { runIdempotent } from '../../src/index.js';
import {
  type AdapterQueries,
  adapterForUrl,
  idempotencyStatementNames,
  prismaStore,
} from '../../src/prisma/index.js';
import { uniqueScope } from '../helpers/databases.js';

/**
 * On PostgreSQL, `adapterForUrl` prepares the store's own statements once per connection, under
 * names (`idempotencyStatementNames`), and leaves every other statement unnamed. Calls made one
 * after another use one pooled connection, whose prepared statements `pg_prepared_statements` lists.
 */
const url = process.env.TEST_POSTGRES_URL;

interface Prepared {
  name: string;
  statement: string;
}

(url ? describe : describe.skip)('prepared statements on PostgreSQL', () => {
  const opened: { $disconnect(): Promise<void> }[] = [];
  afterAll(() => Promise.all(opened.map((client) => client.$disconnect())));

  async function open(databaseUrl: string) {
    const prisma = new PrismaClient({ adapter: (await adapterForUrl(databaseUrl)) as never });
    opened.push(prisma);
    const reads = (await (await adapterForUrl(databaseUrl)).connect()) as AdapterQueries & {
      dispose(): Promise<void>;
    };
    opened.push({ $disconnect: () => reads.dispose() });
    /** The statements prepared on the client's connection, and on the reads adapter's. */
    const prepared = async () => ({
      client: await prisma.$transaction((tx) =>
        tx.$queryRawUnsafe<Prepared[]>('SELECT name, statement FROM pg_prepared_statements'),
      ),
      reads: (
        await reads.queryRaw({
          sql: 'SELECT name, statement FROM pg_prepared_statements',
          args: [],
          argTypes: [],
        })
      ).rows.map(([name, statement]) => ({ name, statement }) as Prepared),
    });
    return { prisma, reads, prepared };
  }

  /** A fresh key, then its replay, through a store that reads through `reads`. */
  async function payTwice(prisma: PrismaClient, reads: AdapterQueries) {
    const store = prismaStore(prisma, { reads });
    const scope = uniqueScope();
    const call = () =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: { amount: 5 } }, async (tx) => {
        await tx.$queryRawUnsafe('SELECT 1 AS user_statement');
        return { paid: 5 };
      });
    expect((await call()).replayed).toBe(false);
    expect((await call()).replayed).toBe(true);
  }

  it('prepares the claim, the completion and the read by name, and nothing of the resolver’s', async () => {
    const { prisma, reads, prepared } = await open(url!);
    await payTwice(prisma, reads);
    const { client, reads: onReads } = await prepared();
    const named = (list: Prepared[]) =>
      Object.fromEntries(
        list.map(({ name, statement }) => [statement.split(/\s+/).slice(0, 3).join(' '), name]),
      );
    expect(named(client)).toEqual({
      'INSERT INTO idempotency_records': expect.stringMatching(/^im_[0-9a-f]{20}$/),
      'WITH done AS': expect.stringMatching(/^im_[0-9a-f]{20}$/), // the completion
    });
    expect(named(onReads)).toEqual({ 'SELECT scope, idempotency_key,': expect.stringMatching(/^im_/) });
    for (const { name, statement } of [...client, ...onReads]) {
      expect(idempotencyStatementNames({ sql: statement })).toBe(name);
    }
  });

  it('prepares nothing by name behind PgBouncer (?pgbouncer=true)', async () => {
    const behind = new URL(url!);
    behind.searchParams.set('pgbouncer', 'true');
    const { prisma, reads, prepared } = await open(behind.toString());
    await payTwice(prisma, reads);
    expect(await prepared()).toEqual({ client: [], reads: [] });
  });

  it('names no statement it did not write', () => {
    expect(idempotencyStatementNames({ sql: 'SELECT 1 AS user_statement' })).toBe('');
  });
});
