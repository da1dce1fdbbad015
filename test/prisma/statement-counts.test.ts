import { PrismaMariaDb } from '@prisma/adapter-mariadb';
import { PrismaPg } from '@prisma/adapter-pg';
import { Decimal } from '@prisma/client/runtime/client';
import { initTRPC } from '@trpc/server';
import { createSchema, createYoga } from 'graphql-yoga';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { PrismaClient } from '../../generated/postgresql/client.js';
import { useIdempotency } from '../../src/envelop/index.js';
import { runIdempotent } from '../../src/index.js';
import { directStatements, prismaStore } from '../../src/prisma/index.js';
import { idempotency } from '../../src/trpc/index.js';
import { uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';
import { recordedAdapter } from '../helpers/recorded-adapter.js';

const url = process.env.TEST_POSTGRES_URL;

/**
 * What each path sends to PostgreSQL, message by message, as the server receives it (BEGIN and
 * COMMIT included, which Prisma's query log leaves out). A change that adds a round trip to a path
 * fails here; one that removes one updates the expected list on purpose.
 */
(url ? describe : describe.skip)('statements per path on PostgreSQL', () => {
  /** A client whose every query, on every pooled connection, is written down. */
  function countedClient({ direct = false } = {}) {
    const sent: string[] = [];
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('connect', (connection) => {
      const query = connection.query.bind(connection) as (...args: unknown[]) => unknown;
      (connection as { query: unknown }).query = (...args: unknown[]) => {
        const first = args[0] as string | { text: string };
        sent.push(summary(typeof first === 'string' ? first : first.text));
        return query(...args);
      };
    });
    const adapter = new PrismaPg(pool);
    const prisma = new PrismaClient({ adapter: direct ? directStatements(adapter) : adapter });
    return { prisma, sent, pool };
  }

  /** The statement's verb and table: enough to tell every step apart (an `UPDATE` inside `WITH` too). */
  function summary(text: string): string {
    const words = text
      .replace(/\s+/g, ' ')
      .trim()
      .replace(/^WITH \w+ AS \(/i, '');
    const verb = words.split(' ')[0]!.toUpperCase();
    const table = /\b(?:FROM|INTO|UPDATE)\s+"?(?:public"?\."?)?"?(\w+)/i.exec(words)?.[1];
    const lock = /\bFOR (SHARE|UPDATE)\b/i.exec(words)?.[0];
    return [verb, table, lock].filter(Boolean).join(' ');
  }

  let one: ReturnType<typeof countedClient>;
  let other: ReturnType<typeof countedClient>;
  beforeAll(async () => {
    one = countedClient();
    other = countedClient();
    await one.prisma.$queryRawUnsafe('SELECT 1');
    await other.prisma.$queryRawUnsafe('SELECT 1');
  });
  afterAll(async () => {
    await one?.prisma.$disconnect();
    await other?.prisma.$disconnect();
  });

  const pay =
    (userId: string) =>
    (tx: unknown): Promise<{ id: number }> =>
      (tx as PrismaClient).payment.create({
        data: { userId, amount: new Decimal('9.99'), currency: 'EUR' },
        select: { id: true },
      });

  async function counted<T>(client: ReturnType<typeof countedClient>, run: () => Promise<T>) {
    client.sent.length = 0;
    await run();
    return [...client.sent];
  }

  const CLAIM = 'INSERT idempotency_records';
  const FIND = 'SELECT idempotency_records';

  it('fresh key: read, BEGIN, claim, the resolver, result, COMMIT', async () => {
    const scope = uniqueScope();
    const store = prismaStore(one.prisma);
    const sent = await counted(one, () =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, pay(scope)),
    );
    expect(sent).toEqual([FIND, 'BEGIN', CLAIM, 'INSERT payments', 'UPDATE idempotency_records', 'COMMIT']);
  });

  it('fresh key hinted as a first attempt: BEGIN, claim, the resolver, result, COMMIT', async () => {
    const scope = uniqueScope();
    const store = prismaStore(one.prisma);
    const sent = await counted(one, () =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {}, firstAttempt: true }, pay(scope)),
    );
    expect(sent).toEqual(['BEGIN', CLAIM, 'INSERT payments', 'UPDATE idempotency_records', 'COMMIT']);
  });

  it.each([
    // Past the client: a savepoint after the claim, and a replayable error kept back at it.
    [true, ['SAVEPOINT'], ['ROLLBACK', 'UPDATE idempotency_records', 'COMMIT']],
    // Through it: no savepoint; the error is kept by a transaction of its own after the rollback
    // (and the question whether the database had aborted the transaction, as after any error).
    [false, [], ['SELECT', 'ROLLBACK', 'BEGIN', CLAIM, 'UPDATE idempotency_records', 'COMMIT']],
  ])('with replayErrors, directStatements %s: what keeping an error sends', async (direct, marked, kept) => {
    const client = countedClient({ direct });
    try {
      const scope = uniqueScope();
      const store = prismaStore(client.prisma);
      const declined = new Error('card declined');
      const options = { store, scope, operation: 'pay', input: {}, firstAttempt: true };
      const replayErrors = (error: unknown) => error === declined;
      const paid = await counted(client, () =>
        runIdempotent({ ...options, key: 'paid', replayErrors }, pay(scope)),
      );
      expect(paid).toEqual([
        'BEGIN',
        CLAIM,
        ...marked,
        'INSERT payments',
        'UPDATE idempotency_records',
        'COMMIT',
      ]);
      const refused = await counted(client, () =>
        runIdempotent({ ...options, key: 'declined', replayErrors }, async (tx) => {
          await pay(scope)(tx);
          throw declined;
        }).catch(() => undefined),
      );
      expect(refused).toEqual(['BEGIN', CLAIM, ...marked, 'INSERT payments', ...kept]);
    } finally {
      await client.prisma.$disconnect();
    }
  });

  // The integrations only translate: a call through them sends what `runIdempotent` sends.
  const FIRST_ATTEMPT = { 'idempotency-key': 'k', 'idempotency-attempt': '1' };

  // Through the client and past it (`directStatements`, where a savepoint would be sent).
  const throughAndPast = [false, true];

  it.each(throughAndPast)(
    'fresh key through the tRPC middleware, first attempt, directStatements %s: the same five statements',
    async (direct) => {
      const client = countedClient({ direct });
      try {
        const scope = uniqueScope();
        const t = initTRPC.context<{ req: { headers: Record<string, string> } }>().create();
        const router = t.router({
          pay: t.procedure
            .use(idempotency({ store: prismaStore(client.prisma), scope: () => scope }))
            .mutation(({ ctx }) => pay(scope)(ctx.tx)),
        });
        const caller = t.createCallerFactory(router)({ req: { headers: FIRST_ATTEMPT } });
        const sent = await counted(client, () => caller.pay());
        expect(sent).toEqual(['BEGIN', CLAIM, 'INSERT payments', 'UPDATE idempotency_records', 'COMMIT']);
      } finally {
        await client.prisma.$disconnect();
      }
    },
  );

  it.each(throughAndPast)(
    'fresh key through the Envelop plugin (Yoga), first attempt, directStatements %s: the same five statements',
    async (direct) => {
      const client = countedClient({ direct });
      try {
        const scope = uniqueScope();
        const yoga = createYoga({
          schema: createSchema({
            typeDefs: 'type Query { ok: Boolean } type Mutation { pay: Int! }',
            resolvers: { Mutation: { pay: async (_, __, { tx }) => (await pay(scope)(tx)).id } },
          }),
          logging: false,
          plugins: [useIdempotency({ store: prismaStore(client.prisma), scope: () => scope })],
        });
        const sent = await counted(client, async () => {
          const response = await yoga.fetch('http://yoga/graphql', {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...FIRST_ATTEMPT },
            body: JSON.stringify({ query: 'mutation { pay }' }),
          });
          expect(await response.json()).toMatchObject({ data: { pay: expect.any(Number) } });
        });
        expect(sent).toEqual(['BEGIN', CLAIM, 'INSERT payments', 'UPDATE idempotency_records', 'COMMIT']);
      } finally {
        await client.prisma.$disconnect();
      }
    },
  );

  it('a first attempt whose key already completed (a wrong hint): replayed through the claim', async () => {
    const scope = uniqueScope();
    const store = prismaStore(one.prisma);
    const call = (firstAttempt: boolean) =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {}, firstAttempt }, pay(scope));
    const first = await call(true);
    let replay: Awaited<ReturnType<typeof call>> | undefined;
    const sent = await counted(one, async () => {
      replay = await call(true);
    });
    expect(sent).toEqual(['BEGIN', CLAIM, `${FIND} FOR UPDATE`, 'COMMIT']);
    expect(replay).toEqual({ ...first, replayed: true });
    expect(await one.prisma.payment.count({ where: { userId: scope } })).toBe(1);
  });

  it('the same statements when they skip Prisma’s client runtime (directStatements)', async () => {
    const direct = countedClient({ direct: true });
    try {
      const scope = uniqueScope();
      const store = prismaStore(direct.prisma);
      const call = (firstAttempt: boolean) =>
        runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {}, firstAttempt }, pay(scope));
      let first: Awaited<ReturnType<typeof call>> | undefined;
      expect(
        await counted(direct, async () => {
          first = await call(true);
        }),
      ).toEqual(['BEGIN', CLAIM, 'INSERT payments', 'UPDATE idempotency_records', 'COMMIT']);
      let replay: Awaited<ReturnType<typeof call>> | undefined;
      expect(
        await counted(direct, async () => {
          replay = await call(true);
        }),
      ).toEqual(['BEGIN', CLAIM, `${FIND} FOR UPDATE`, 'COMMIT']);
      expect(replay).toEqual({ ...first, replayed: true });
    } finally {
      await direct.prisma.$disconnect();
    }
  });

  it('replay: one read', async () => {
    const scope = uniqueScope();
    const store = prismaStore(one.prisma);
    const call = () => runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, pay(scope));
    await call();
    expect(await counted(one, call)).toEqual([FIND]);
  });

  it('replay with reads through the driver adapter: the same one read, sent past the client', async () => {
    const scope = uniqueScope();
    // Over the counted client's own pool, so the pool's count shows the adapter's read too.
    const adapter = recordedAdapter(await new PrismaPg(one.pool).connect());
    try {
      const store = prismaStore(one.prisma, { reads: adapter.reads });
      const call = () => runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, pay(scope));
      const first = await call();
      adapter.queries.length = 0;
      expect(await counted(one, call)).toEqual([FIND]);
      expect(adapter.queries).toHaveLength(1);
      expect(await call()).toEqual({ ...first, replayed: true });
    } finally {
      await adapter.reads.dispose();
    }
  });

  it('replay with localCache, on the server that ran it: nothing', async () => {
    const scope = uniqueScope();
    const store = prismaStore(one.prisma, { localCache: { max: 10 } });
    const call = () => runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, pay(scope));
    await call();
    expect(await counted(one, call)).toEqual([]);
  });

  it('duplicate from another server while the first runs: it waits on the claim, then replays', async () => {
    const scope = uniqueScope();
    const held = gate();
    const started = gate();
    const first = runIdempotent(
      { store: prismaStore(one.prisma), scope, key: 'k', operation: 'pay', input: {} },
      async (tx) => {
        const payment = await pay(scope)(tx);
        started.open();
        await held.opened;
        return payment;
      },
    );
    await started.opened;
    const sent = counted(other, () =>
      runIdempotent(
        { store: prismaStore(other.prisma), scope, key: 'k', operation: 'pay', input: {} },
        pay(scope),
      ),
    );
    setTimeout(held.open, 50);
    await first;
    expect(await sent).toEqual([FIND, 'BEGIN', CLAIM, `${FIND} FOR UPDATE`, 'COMMIT']);
  });

  it('takeover of an expired record: read, BEGIN, claim, locked read, takeover, resolver, result, COMMIT', async () => {
    const scope = uniqueScope();
    const store = prismaStore(one.prisma);
    await runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {}, ttlMs: 1 }, pay(scope));
    await one.prisma.$executeRawUnsafe(
      `UPDATE idempotency_records SET expires_at = now() - interval '1 minute' WHERE scope = $1`,
      scope,
    );
    const sent = await counted(one, () =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, pay(scope)),
    );
    expect(sent).toEqual([
      FIND,
      'BEGIN',
      CLAIM,
      `${FIND} FOR UPDATE`,
      'UPDATE idempotency_records',
      'INSERT payments',
      'UPDATE idempotency_records',
      'COMMIT',
    ]);
  });

  it('lease: read, claim, the resolver on its own, result', async () => {
    const scope = uniqueScope();
    const store = prismaStore(one.prisma);
    const sent = await counted(one, () =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {}, mode: 'lease' }, pay(scope)),
    );
    expect(sent).toEqual([FIND, CLAIM, 'INSERT payments', 'UPDATE idempotency_records']);
  });

  it('lease hinted as a first attempt: claim, the resolver on its own, result', async () => {
    const scope = uniqueScope();
    const store = prismaStore(one.prisma);
    const sent = await counted(one, () =>
      runIdempotent(
        { store, scope, key: 'k', operation: 'pay', input: {}, mode: 'lease', firstAttempt: true },
        pay(scope),
      ),
    );
    expect(sent).toEqual([CLAIM, 'INSERT payments', 'UPDATE idempotency_records']);
  });
});

const mariadbUrl = process.env.TEST_MYSQL_URL;

/** MariaDB has no UPDATE … RETURNING: a fresh key's completion still reads back nothing. */
(mariadbUrl ? describe : describe.skip)('statements per path on MariaDB', () => {
  const sent: string[] = [];
  let prisma: MysqlClient;
  beforeAll(async () => {
    prisma = new MysqlClient({
      adapter: new PrismaMariaDb(mariadbUrl!.replace(/^mysql:/, 'mariadb:')),
      log: [{ emit: 'event', level: 'query' }],
    });
    // The first three words of each statement; the adapter's implicit COMMIT is a comment.
    const onQuery = ({ query }: { query: string }) => {
      if (!query.startsWith('--')) sent.push(query.replace(/\s+/g, ' ').split(' ').slice(0, 3).join(' '));
    };
    (prisma as unknown as { $on(event: 'query', listener: typeof onQuery): void }).$on('query', onQuery);
    await prisma.$queryRawUnsafe('SELECT 1');
  });
  afterAll(() => prisma?.$disconnect());

  it('fresh key, first attempt: the claim and the completion, one statement each', async () => {
    const scope = uniqueScope();
    sent.length = 0;
    const result = await runIdempotent(
      { store: prismaStore(prisma), scope, key: 'k', operation: 'pay', input: {}, firstAttempt: true },
      async () => ({ paid: true }),
    );
    expect(sent).toEqual(['INSERT IGNORE INTO', 'INSERT INTO idempotency_records']);
    expect(result.record.expiresAt.getTime() - result.record.completedAt.getTime()).toBe(86_400_000);
    const stored = await prismaStore(prisma).find(scope, 'k');
    expect(stored).toMatchObject({ status: 'COMPLETED', result: expect.stringContaining('paid') });
    expect(stored!.completedAt).toEqual(result.record.completedAt);
  });
});
