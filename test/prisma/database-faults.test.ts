import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import type { PrismaClient as SqliteClient } from '../../generated/sqlite/client.js';
import {
  IdempotencyStoreUnavailableError,
  IdempotencyTransactionExpiredError,
} from '../../src/core/errors.js';
import { runIdempotent } from '../../src/core/run-idempotent.js';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import { classify } from '../../src/prisma/database-errors.js';
import { type PrismaStoreOptions, prismaStore } from '../../src/prisma/store.js';
import { uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';
import {
  type PrivateServer,
  type PrivateServerResult,
  privateMariaDb,
  privatePostgres,
  tryPrivateServer,
} from '../helpers/private-server.js';
import { countRecords, insertRecords } from '../helpers/records.js';

// Real faults on a database server of the test's own (stopped, killed, shut down, timed out):
// every call they break rolled back, so it must answer a 503 code the shipped clients retry, leave
// nothing committed, and a retry with the same key must then run the mutation exactly once.

type Client = SqliteClient;
type Tx = Parameters<Parameters<Client['$transaction']>[0]>[0];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** MariaDB pools: a few connections, and short waits for one, so that an outage fails fast. */
const MARIADB_POOL = { connectionLimit: '4', acquireTimeout: '3000', connectTimeout: '1000' };

async function connect(server: PrivateServer, url = server.url): Promise<Client> {
  const Generated = (server.provider === 'postgresql'
    ? PostgresClient
    : MysqlClient) as unknown as typeof SqliteClient;
  if (server.provider === 'postgresql')
    return new Generated({ adapter: (await adapterForUrl(url)) as never });
  const pooled = new URL(url);
  for (const [name, value] of Object.entries(MARIADB_POOL)) {
    if (!pooled.searchParams.has(name)) pooled.searchParams.set(name, value);
  }
  const prisma = new Generated({ adapter: (await adapterForUrl(pooled.toString())) as never });
  // The mariadb connector rejects a promise nobody handles when a connection it is still opening
  // in the background loses its socket (a server stopping): open the whole pool before any fault.
  await Promise.all(
    Array.from({ length: Number(MARIADB_POOL.connectionLimit) }, () =>
      prisma.$queryRawUnsafe('SELECT SLEEP(0.05)'),
    ),
  );
  return prisma;
}

/** Polls `condition` every 25 ms for up to 10 s. */
async function until(condition: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 10_000; !(await condition()); await sleep(25)) {
    if (Date.now() > deadline) throw new Error('timed out waiting for the fault to be in place');
  }
}

/**
 * One payment under one key of a scope of its own; `run(fault)` calls it through `runIdempotent`
 * with `fault` run inside the resolver after its write.
 */
function payment(prisma: Client, options: PrismaStoreOptions = {}) {
  const scope = uniqueScope();
  const store = prismaStore(prisma, { ...options });
  const state = { runs: 0 };
  const run = (fault?: (tx: Tx) => Promise<void>, client = prisma) =>
    runIdempotent(
      {
        store: client === prisma ? store : prismaStore(client, options),
        scope,
        key: 'pay-1',
        operation: 'payments.create',
        input: { amount: '5.00' },
      },
      async (tx: Tx) => {
        state.runs++;
        const row = await tx.payment.create({
          data: { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' },
        });
        await fault?.(tx);
        return { id: row.id };
      },
    );
  return { scope, state, run };
}

/** What the scope has committed: payments and idempotency records. */
async function committed(prisma: Client, provider: 'postgresql' | 'mysql', scope: string) {
  // A pooled connection the restart closed, or a pool still backing off from the connections it
  // could not open while the server was down (MariaDB's waits longer after each failure: a CI run
  // under load met four 3 s pool timeouts in a row): asked again until the deadline.
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      return {
        payments: await prisma.payment.count({ where: { userId: scope } }),
        records: await countRecords(prisma, provider, scope),
      };
    } catch (error) {
      if (classify(error) !== 'connection' || Date.now() > deadline) throw error;
    }
  }
}

/**
 * What the store's error wraps, level by level: each error's name, message and database code
 * (an error Prisma raised names the code in its message; a driver adapter's keeps it beside).
 */
function causes(error: unknown): string {
  const levels: string[] = [];
  for (let node = (error as Error).cause; node && levels.length < 5; node = (node as Error).cause) {
    const { name, message, originalCode, code } = node as Error & { originalCode?: unknown; code?: unknown };
    levels.push([name, message, originalCode, code].filter((part) => part !== undefined).join(' '));
  }
  return levels.join(' <- ');
}

/**
 * The fault's outcome: the 503 code (`expected`), nothing committed, and a retry with the same key
 * that runs the mutation once and then replays it.
 */
async function expectRetryable(
  prisma: Client,
  server: PrivateServer,
  call: ReturnType<typeof payment>,
  error: unknown,
  expected: typeof IdempotencyStoreUnavailableError | typeof IdempotencyTransactionExpiredError,
) {
  expect(error).toBeInstanceOf(expected);
  expect((error as IdempotencyStoreUnavailableError).status).toBe(503);
  expect(await committed(prisma, server.provider, call.scope)).toEqual({ payments: 0, records: 0 });
  const runsBefore = call.state.runs;
  const retried = await retryLikeTheClients(() => call.run());
  expect(retried.replayed).toBe(false);
  const replayed = await call.run();
  expect(replayed).toMatchObject({ replayed: true, value: retried.value });
  expect(call.state.runs).toBe(runsBefore + 1);
  expect(await committed(prisma, server.provider, call.scope)).toEqual({ payments: 1, records: 1 });
}

/**
 * Retries on a 503 code, as `idempotencyLink` and `idempotentFetch` do: after a restart a pool may
 * still hand out a connection the server closed, which fails (and rolls back) the first retry.
 */
async function retryLikeTheClients<T>(call: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      const retryable =
        error instanceof IdempotencyStoreUnavailableError ||
        error instanceof IdempotencyTransactionExpiredError;
      if (!retryable || attempt >= 6) throw error;
      await sleep(200 * attempt);
    }
  }
}

/** Runs `test` with a client of its own, so that no test meets connections another one broke. */
async function withClient(server: PrivateServer, test: (prisma: Client) => Promise<void>, url = server.url) {
  const prisma = await connect(server, url);
  try {
    await test(prisma);
  } finally {
    await prisma.$disconnect().catch(() => undefined);
  }
}

/** Holds the record of `(scope, 'pay-1')` in an open transaction until `release()`. */
function holdKey(holder: Client, provider: 'postgresql' | 'mysql', scope: string) {
  const { opened, open } = gate();
  const inserted = gate();
  const held = holder
    .$transaction(
      async (tx) => {
        await insertRecords(tx, provider, [
          { scope, key: 'pay-1', status: 'IN_PROGRESS', expiresAt: new Date(Date.now() + 60_000) },
        ]);
        inserted.open();
        await opened;
      },
      { timeout: 30_000 },
    )
    .catch(() => undefined);
  const release = () => {
    open();
    return held;
  };
  return { inserted: inserted.opened, release };
}

const kinds = [
  { name: 'PostgreSQL', provider: 'postgresql', start: privatePostgres },
  { name: 'MariaDB', provider: 'mysql', start: privateMariaDb },
] as const;

for (const kind of kinds) {
  // A restart under load can keep a pool backing off for many seconds (see `committed`).
  describe(`database faults on a private ${kind.name} server`, { timeout: 90_000 }, () => {
    let started: PrivateServerResult | undefined;
    // Started here rather than when the file loads, so that a run that filters these tests out
    // starts (and leaves behind) no server.
    beforeAll(async () => {
      started = await tryPrivateServer(kind.start);
    });
    afterAll(() => started?.server?.destroy());

    /** Runs `test` on the server with a client of its own; skipped, saying why, without a server. */
    const withServer = (
      ctx: TestContext,
      test: (server: PrivateServer, prisma: Client) => Promise<void>,
      url?: (server: PrivateServer) => string,
    ) => {
      const server = started?.server;
      if (!server) return ctx.skip(`no private ${kind.name} server: ${started?.reason ?? 'not started'}`);
      // Running, whatever the test before left: one that failed before restarting it fails alone.
      return server.start().then(() => withClient(server, (prisma) => test(server, prisma), url?.(server)));
    };

    // The claim waits on the held key: a lock wait in PostgreSQL; in MariaDB the INSERT IGNORE
    // shows in the process list (INNODB_TRX does not list it while it waits).
    const lockWaits =
      kind.provider === 'postgresql'
        ? "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        : "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT IGNORE INTO idempotency_records%'";
    const waiting = (prisma: Client) => async () =>
      Number((await prisma.$queryRawUnsafe<{ n: unknown }[]>(lockWaits))[0]?.n) > 0;

    it("answers 503 when the server stops under the store's claim, and the retry runs once", (ctx) =>
      withServer(ctx, async (server, prisma) => {
        const call = payment(prisma);
        const holder = await connect(server);
        try {
          const hold = holdKey(holder, server.provider, call.scope);
          await hold.inserted;
          let settled: unknown;
          const pending = call.run().then(
            (value) => (settled = value),
            (e: unknown) => (settled = e),
          );
          await until(async () => {
            if (settled) throw new Error('The claim did not wait for the held key', { cause: settled });
            return waiting(prisma)();
          });
          await server.stop();
          const error = await pending;
          await hold.release();
          // PostgreSQL: 57P01 (admin shutdown); MariaDB: the connector's 45009 (socket closed), or
          // EPIPE when its write meets the closed socket first.
          expect(causes(error)).toMatch(server.provider === 'postgresql' ? /57P01/ : /45009|1927|1053|EPIPE/);
          await server.start();
          await expectRetryable(prisma, server, call, error, IdempotencyStoreUnavailableError);
        } finally {
          await holder.$disconnect().catch(() => undefined);
        }
      }));

    it('answers 503 when the server stops while the resolver holds the transaction, and the retry runs once', (ctx) =>
      withServer(ctx, async (server, prisma) => {
        const call = payment(prisma);
        const error = await call.run(() => server.stop()).catch((e: unknown) => e);
        // pg: "Client has encountered a connection error and is not queryable" at the store's
        // completion; MariaDB: 45013 "Cannot execute new commands: connection closed".
        expect(causes(error)).toMatch(
          server.provider === 'postgresql' ? /not queryable/ : /45013|connection closed/,
        );
        await server.start();
        await expectRetryable(prisma, server, call, error, IdempotencyStoreUnavailableError);
      }));

    it("answers 503 when the server is killed under the resolver's own tx write, and the retry runs once", (ctx) =>
      withServer(ctx, async (server, prisma) => {
        const call = payment(prisma);
        const slowWrite =
          server.provider === 'postgresql'
            ? `INSERT INTO orders (user_id, sku, quantity, total) SELECT $1, 'slow', 1, 1 FROM pg_sleep(3)`
            : `INSERT INTO orders (user_id, sku, quantity, total) SELECT ?, 'slow', 1, 1 FROM (SELECT SLEEP(3)) AS s`;
        let killed: Promise<void> | undefined;
        const error = await call
          .run(async (tx) => {
            setTimeout(() => {
              killed = server.kill();
            }, 300);
            await tx.$executeRawUnsafe(slowWrite, call.scope);
          })
          .catch((e: unknown) => e);
        // Gone before it starts again: a start() made while the killed server was still exiting met
        // its port open, took it for running and returned, and no server came back (MariaDB, twice
        // in CI under load: the pool found nothing to connect to for 30 s).
        await killed;
        // pg: "Connection terminated unexpectedly" (the postmaster died); MariaDB: 45009.
        expect(causes(error)).toMatch(
          server.provider === 'postgresql' ? /Connection terminated unexpectedly/ : /45009|socket/,
        );
        await server.start();
        await expectRetryable(prisma, server, call, error, IdempotencyStoreUnavailableError);
      }));

    it.for([
      ['the resolver’s own tx write', true],
      ['the store’s completion', false],
    ] as const)(
      'answers IDEMPOTENCY_TRANSACTION_EXPIRED when the resolver outlives the transaction timeout (caught at %s)',
      ([, writesLate], ctx) =>
        withServer(ctx, async (server, prisma) => {
          const call = payment(prisma, { transaction: { timeout: 400 } });
          const error = await call
            .run(async (tx) => {
              await sleep(700);
              if (writesLate)
                await tx.order.create({ data: { userId: call.scope, sku: 'late', quantity: 1, total: 1 } });
            })
            .catch((e: unknown) => e);
          expect(causes(error)).toMatch(/expired transaction/);
          await expectRetryable(prisma, server, call, error, IdempotencyTransactionExpiredError);
        }),
    );

    if (kind.provider === 'postgresql') {
      it('answers 503 with 57P03 while the server shuts down, and the retry runs once', (ctx) =>
        withServer(ctx, async (server, prisma) => {
          const call = payment(prisma);
          const holder = await connect(server);
          try {
            // A session that keeps the smart shutdown waiting, refusing new connections meanwhile.
            const hold = holdKey(holder, server.provider, uniqueScope());
            await hold.inserted;
            await server.refuseNewConnections!();
            // A client with no pooled connection, so that its first statement has to connect.
            let error: unknown;
            await until(async () => {
              error = await withClient(server, async (fresh) => {
                error = await call.run(undefined, fresh).catch((e: unknown) => e);
              }).then(() => error);
              return /57P03/.test(causes(error));
            });
            await hold.release();
            await server.stop().catch(() => undefined);
            await server.start();
            await expectRetryable(prisma, server, call, error, IdempotencyStoreUnavailableError);
          } finally {
            await holder.$disconnect().catch(() => undefined);
          }
        }));

      it('answers 503 when the connection is lost at COMMIT, and the retry runs once', (ctx) =>
        withServer(ctx, async (server, prisma) => {
          // A deferred trigger ends its own backend at COMMIT, once (a sequence is not rolled back).
          await prisma.$executeRawUnsafe('CREATE SEQUENCE IF NOT EXISTS commit_faults');
          await prisma.$executeRawUnsafe(
            `CREATE OR REPLACE FUNCTION lose_connection_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.sku = 'doomed' AND nextval('commit_faults') = 1 THEN
                 PERFORM pg_terminate_backend(pg_backend_pid());
               END IF;
               RETURN NULL;
             END $$`,
          );
          await prisma.$executeRawUnsafe(
            `CREATE CONSTRAINT TRIGGER lose_connection_at_commit AFTER INSERT ON orders
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lose_connection_at_commit()`,
          );
          const call = payment(prisma);
          const error = await call
            .run(async (tx) => {
              await tx.order.create({ data: { userId: call.scope, sku: 'doomed', quantity: 1, total: 1 } });
            })
            .catch((e: unknown) => e);
          expect(causes(error)).toMatch(/terminating connection due to administrator command/);
          await expectRetryable(prisma, server, call, error, IdempotencyStoreUnavailableError);
        }));
    }

    if (kind.provider === 'mysql') {
      it('answers 503 when the server is down and no connection can be had, and the retry runs once', (ctx) =>
        withServer(
          ctx,
          async (server, prisma) => {
            const call = payment(prisma);
            await server.stop();
            const error = await call.run().catch((e: unknown) => e);
            expect(causes(error)).toMatch(/pool timeout/);
            await server.start();
            await expectRetryable(prisma, server, call, error, IdempotencyStoreUnavailableError);
          },
          (server) => `${server.url}?acquireTimeout=1000&connectTimeout=500`,
        ));
    }

    /** A lease-mode charge whose gateway call succeeds, then the database goes down. */
    const leasedCharge = (prisma: Client, leaseMs: number, outage: () => Promise<void>) => {
      const scope = uniqueScope();
      const charges = { count: 0 };
      const run = () =>
        runIdempotent(
          {
            store: prismaStore(prisma),
            mode: 'lease',
            leaseMs,
            scope,
            key: 'charge-1',
            operation: 'payments.charge',
            input: { amount: 5 },
          },
          async () => {
            charges.count++; // the gateway charged the card
            await outage();
            return { charged: true };
          },
        );
      return { scope, charges, run };
    };

    it('lease mode: retries storing the result through a restart while the lease lasts, so the card is charged once', (ctx) =>
      withServer(ctx, async (server, prisma) => {
        let restarted: Promise<void> | undefined;
        const charge = leasedCharge(prisma, 20_000, async () => {
          await server.stop();
          restarted = sleep(1_500).then(() => server.start());
        });
        await expect(charge.run()).resolves.toMatchObject({ value: { charged: true }, replayed: false });
        // Not left to start the server in the middle of the next test.
        await restarted;
        await expect(retryLikeTheClients(charge.run)).resolves.toMatchObject({ replayed: true });
        expect(charge.charges.count).toBe(1);
      }));

    it('lease mode: answers IDEMPOTENCY_OUTCOME_UNKNOWN when the database stays down past the lease, never a retryable 503', (ctx) =>
      withServer(ctx, async (server, prisma) => {
        const charge = leasedCharge(prisma, 2_000, () => server.stop());
        const error = await charge.run().catch((e: unknown) => e);
        expect(error).toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN', status: 500 });
        await server.start();
        expect(charge.charges.count).toBe(1);
      }));
  });
}
