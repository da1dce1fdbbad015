/** idempotent-mutations/prisma: the Prisma 7 store, the sweeper and the record statistics. */
export {
  type AdapterForUrlOptions,
  adapterForUrl,
  type DriverAdapterFactory,
  providerOfUrl,
} from './adapter-for-url.js';
export type { AdapterQueries } from './adapter-queryable.js';
export { retryBusyCommits } from './busy-commits.js';
export type {
  PrismaClientLike,
  PrismaQueryable,
  PrismaTransactionOptions,
  Provider,
  TransactionClientOf,
} from './client.js';
export {
  classify,
  type DatabaseFailure,
  isConnectionError,
  isExpiredTransaction,
  isWriteConflict,
  SQLITE_BUSY_TIMEOUT_MS,
} from './database-errors.js';
export { directStatements } from './direct-statements.js';
export { lazyBegin, type PgClientClass } from './lazy-begin.js';
export { idempotencyStatementNames } from './sql.js';
export {
  type RecordStats,
  recordStats,
  type StatsOptions,
  type StuckRecord,
  stuckRecords,
} from './stats.js';
export { type PrismaStore, type PrismaStoreOptions, prismaStore } from './store.js';
export {
  type Sweeper,
  type SweeperOptions,
  type SweepOptions,
  type SweepProgress,
  startSweeper,
  sweepExpired,
} from './sweep.js';
