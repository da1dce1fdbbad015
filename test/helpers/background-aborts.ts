import type {
  SqlDriverAdapter,
  SqlDriverAdapterFactory,
  SqlQuery,
  Transaction,
} from '@prisma/driver-adapter-utils';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import { directStatements } from '../../src/prisma/direct-statements.js';

/**
 * When the session learns that the database aborted its transaction: on the statement right after
 * the abort (what Galera and CockroachDB usually answer), on the one after that (the statement in
 * between found the transaction's writes gone: twice in one Galera storm's 8,000 requests, Prisma's
 * read-back of its own INSERT found nothing), or never (the session is simply out of its
 * transaction). The simulation runs the statement in between outside the transaction.
 */
export type AbortNotice = 'next statement' | 'statement after next' | 'never';

/** What to abort: the next `times` transactions that run a statement matching `after`. */
export interface AbortPlan {
  /** The statement after which the transaction is aborted (matched against its SQL). */
  after: RegExp;
  notice: AbortNotice;
  /** @default 1 */
  times?: number;
}

/** A driver adapter whose transactions a test can have aborted "in the background". */
export interface BackgroundAborts {
  /** For `new PrismaClient({ adapter })`. */
  adapter: SqlDriverAdapterFactory;
  /** Aborts the next transactions as `plan` says (replacing any plan still pending). */
  plan(plan: AbortPlan): void;
  /** How many transactions were aborted so far. */
  readonly aborted: number;
}

/**
 * A database server that aborts a transaction in the background, as a multi-primary Galera node
 * does when another node's write set wins certification (a "brute force" abort), or CockroachDB
 * when another transaction pushes it. Simulated on a single server with real statements on the
 * transaction's own connection, so the driver adapter and Prisma see what they would see there:
 * - the transaction's writes are rolled back at once (a real `ROLLBACK`), and the session's later
 *   statements run outside any transaction (autocommitted);
 * - the statement the abort is noticed on fails with the database's own conflict error, raised by
 *   the server: MariaDB's 1213 (SQLSTATE 40001, "Deadlock found …"), PostgreSQL's SQLSTATE 40001
 *   (CockroachDB's `TransactionAbortedError`); `COMMIT` and `ROLLBACK` count as statements.
 */
export async function backgroundAborts(
  url: string,
  provider: 'postgresql' | 'mysql',
): Promise<BackgroundAborts> {
  // The server's side, beneath `directStatements` (put back on top below, as `adapterForUrl` puts
  // it): the store's own statements, sent past the client, meet the abort as the client's do.
  const inner = (await adapterForUrl(url, { directStatements: false })) as unknown as SqlDriverAdapterFactory;
  const conflict =
    provider === 'mysql'
      ? `SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found when trying to get lock; try restarting transaction'`
      : `DO $$ BEGIN RAISE EXCEPTION 'restart transaction: TransactionRetryWithProtoRefreshError: TransactionAbortedError(ABORT_REASON_ABORTED_RECORD_FOUND)' USING ERRCODE = '40001'; END $$`;
  let pending: (AbortPlan & { times: number }) | undefined;
  let aborted = 0;

  /** One transaction, aborted in the background once the plan's statement ran in it. */
  function aborting(tx: Transaction): Transaction {
    let wasAborted = false;
    // Statements still to run before the abort is noticed; undefined: nothing left to notice.
    let untilNotice: number | undefined;
    const raw = (sql: string): SqlQuery => ({ sql, args: [], argTypes: [] });
    /**
     * Runs `statement` as the aborted session would: noticing the abort (a `COMMIT` or `ROLLBACK`
     * that notices it still ends the transaction, and the connection goes back to the pool), or
     * outside any transaction.
     */
    const run = async <R>(statement: () => Promise<R>, ends = false): Promise<R> => {
      await abortNow();
      if (untilNotice === undefined || untilNotice-- > 0) return statement();
      untilNotice = undefined;
      // The server's own conflict error.
      const notice = await tx.executeRaw(raw(conflict)).then(
        () => new Error('the conflict statement did not fail'),
        (error: unknown) => error,
      );
      if (ends) await statement();
      throw notice;
    };
    /** The abort the plan's statement set off, carried out before the session's next statement. */
    let abortPending: AbortNotice | undefined;
    const abortAfter = (query: SqlQuery) => {
      if (wasAborted || !pending?.after.test(query.sql)) return;
      wasAborted = true;
      abortPending = pending.notice;
      if (--pending.times === 0) pending = undefined;
      aborted++;
    };
    // Between the statements, as a server's background abort comes: after whoever sent the plan's
    // statement read its answer (as `directStatements` reads MariaDB's status flags in it).
    const abortNow = async () => {
      const notice = abortPending;
      if (notice === undefined) return;
      abortPending = undefined;
      // The server's own statement, on the driver's transaction beneath every wrapper of the
      // adapter (on MariaDB, on the connection itself).
      const { conn } = tx as { conn?: { query(sql: string): Promise<unknown> } };
      if (provider === 'mysql' && conn) await conn.query('ROLLBACK /* aborted in the background */');
      else await tx.executeRaw(raw('ROLLBACK /* aborted in the background */'));
      untilNotice = { 'next statement': 0, 'statement after next': 1, never: Number.POSITIVE_INFINITY }[
        notice
      ];
    };
    return new Proxy(tx, {
      get(target, name, receiver) {
        switch (name) {
          case 'queryRaw':
          case 'executeRaw':
            return async (query: SqlQuery) => {
              const result = await run(() => target[name](query) as Promise<never>);
              abortAfter(query);
              return result;
            };
          case 'commit':
          case 'rollback':
            return () => run(() => target[name](), true);
          default: {
            const value = Reflect.get(target, name, receiver);
            return typeof value === 'function' ? value.bind(target) : value;
          }
        }
      },
    });
  }

  const adapter = new Proxy(inner, {
    get(target, name, receiver) {
      if (name !== 'connect') return Reflect.get(target, name, receiver);
      return async () => {
        const connection = await target.connect();
        return new Proxy(connection, {
          get(c: SqlDriverAdapter, member, r) {
            if (member === 'startTransaction')
              return async (...args: Parameters<SqlDriverAdapter['startTransaction']>) =>
                aborting(await c.startTransaction(...args));
            const value = Reflect.get(c, member, r);
            return typeof value === 'function' ? value.bind(c) : value;
          },
        });
      };
    },
  });
  return {
    adapter: directStatements(adapter),
    plan(plan) {
      pending = { ...plan, times: plan.times ?? 1 };
    },
    get aborted() {
      return aborted;
    },
  };
}
