import type { DriverAdapterFactory } from './adapter-for-url.js';
import { DEFAULT_BUSY_WAIT_MS, retryBusy } from './database-errors.js';
import { type Replacement, withMethods } from './direct-statements.js';

/** How Prisma commits through an adapter that does not commit itself (SQLite's). */
const COMMIT = /^\s*COMMIT\s*;?\s*$/i;
const ROLLBACK = { sql: 'ROLLBACK', args: [], argTypes: [] };

/**
 * The SQLite driver adapter factory `factory` (`new PrismaBetterSqlite3(…)`), whose transactions
 * wait for another connection's readers at `COMMIT`, asynchronously:
 *
 * ```ts
 * const prisma = new PrismaClient({ adapter: retryBusyCommits(new PrismaBetterSqlite3({ url, timeout: SQLITE_BUSY_TIMEOUT_MS })) });
 * ```
 *
 * Outside WAL mode a `COMMIT` waits for the readers of other connections (processes) to finish,
 * for the adapter's busy `timeout`, and then answers `SQLITE_BUSY` with the transaction still open.
 * Prisma then releases the adapter's lock without a `ROLLBACK`, so the connection stays in that
 * transaction: later statements, other requests' too, would run in it, and be lost with it. Here a
 * busy `COMMIT` is sent again after a short jittered pause, for up to `waitMs`; after that, or after
 * a `COMMIT` that failed otherwise (a deferred foreign key), `ROLLBACK` ends the transaction before
 * the error goes on, so nothing of it commits, and the store may run it again.
 * `adapterForUrl`'s SQLite factories come wrapped.
 */
export function retryBusyCommits<Factory extends DriverAdapterFactory>(
  factory: Factory,
  { waitMs = DEFAULT_BUSY_WAIT_MS }: { waitMs?: number } = {},
): Factory {
  const commitWhenFree: Replacement = async (original, query) => {
    if (!COMMIT.test((query as { sql: string }).sql)) return original(query);
    try {
      return await retryBusy(() => original(query), waitMs);
    } catch (error) {
      // Still open after a refused COMMIT (busy, a deferred foreign key): ended here. Where SQLite
      // ended it itself, ROLLBACK only answers that no transaction is active.
      await original(ROLLBACK).catch(() => undefined);
      throw error;
    }
  };
  return withMethods(factory, {
    async connect(connect, ...args) {
      const adapter = (await connect(...args)) as object;
      return withMethods(adapter, {
        async startTransaction(start, ...args) {
          const transaction = (await start(...args)) as object;
          return withMethods(transaction, { executeRaw: commitWhenFree });
        },
      });
    },
  });
}
