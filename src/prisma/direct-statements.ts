import { AsyncLocalStorage } from 'node:async_hooks';
import type { DriverAdapterFactory } from './adapter-for-url.js';
import type { AdapterQueries } from './adapter-queryable.js';
import type { Provider } from './client.js';
import { isWriteConflict } from './database-errors.js';

/**
 * One interactive transaction the store is opening: a driver adapter wrapped by `directStatements`
 * hands it the transaction it starts, as raw queries the store sends past Prisma's client runtime.
 */
export interface Opening {
  direct?: AdapterQueries;
  /** The driver adapter's name (`@prisma/adapter-pg`), once `direct` is set. */
  adapterName?: string;
  /**
   * MySQL/MariaDB, once `direct` is set: whether a statement of Prisma's (the resolver's) ran on the
   * transaction after one failed with a write conflict. The conflict had rolled the transaction back
   * and the session went on outside it: that statement committed on its own.
   */
  wentOnAfterConflict?: () => boolean;
  /**
   * MySQL/MariaDB, once `direct` is set, where the driver lets the server's status flags be read
   * after each statement (the `mariadb` connector's `info.status`): whether a statement of Prisma's
   * (the resolver's) other than a plain `SELECT` succeeded with the session out of its transaction
   * (`SERVER_STATUS_IN_TRANS` clear in its answer), or one succeeded whose answer could not be read.
   * A statement answered inside the transaction ran in it: it committed with it, or rolled back with
   * it. `false` says that no write of Prisma's ran on its own, however the transaction ended.
   */
  wroteOutside?: () => boolean;
  /**
   * Once `direct` is set: refuses, from now on, every statement of Prisma's (the resolver's) but
   * the transaction's end, so that what the transaction commits is only what the store sends next.
   * A statement Prisma handed the adapter before comes first. Returns the way to let them through again.
   */
  seal?: () => () => void;
  /**
   * Once `direct` is set: says the store's work is over, so Prisma may commit. Until then a `COMMIT`
   * of Prisma's side is the resolver's own, and is refused (`CommitRefusedError`).
   */
  workEnded?: () => void;
}

/**
 * Whether the store's statements in `opening` reach PostgreSQL in the order they are sent, so a
 * completion can ride ahead of the commit (`completesWithCommit`): `@prisma/adapter-pg` hands each
 * statement to `pg` at once.
 */
export function sendsInOrder(opening: Opening, provider: Provider): boolean {
  return provider === 'postgresql' && opening.adapterName === '@prisma/adapter-pg';
}

/** An opening whose transaction has not started yet: the first transaction started in it is taken. */
interface Pending {
  opening: Opening;
  taken: boolean;
}

const openings = new AsyncLocalStorage<Pending>();
/**
 * Whether any factory was wrapped: until one is, `openTransaction` runs no `AsyncLocalStorage`, whose
 * hooks, once on, cost every promise of the process a little (see bench/README.md).
 */
let wrapping = false;
/**
 * Openings not yet taken. The storage is on only while there are some: once it is, Node 20 and 22
 * run a hook for every promise of the process, so it is turned off when none waits.
 */
let waiting = 0;
/**
 * Whether an `AsyncLocalStorage` that is on costs every promise a hook. From Node 24 it keeps its
 * stores in the async context frame instead, with no hooks to turn off, and `disable()`, which Node
 * may deprecate, is not called.
 */
const storageRunsHooks = Number(process.versions.node.split('.')[0]) < 24;

/**
 * Runs `open`, which starts one interactive transaction (`prisma.$transaction`), so that a driver
 * adapter wrapped by `directStatements` hands the first transaction it starts to `opening.direct`.
 * Read it as the transaction's work begins, and call `begun()` there: a transaction the work opens
 * of its own comes later, and is never handed over.
 */
export function openTransaction<T>(
  open: (opening: Opening, begun: () => void) => PromiseLike<T>,
): Promise<T> {
  const opening: Opening = {};
  if (!wrapping) return Promise.resolve(open(opening, () => undefined));
  const pending: Pending = { opening, taken: false };
  const begun = () => {
    take(pending);
  };
  waiting++;
  // Taken when the adapter starts its transaction, or when the work begins (an adapter not
  // wrapped); else, having failed before either (at once, too), as it settles.
  return new Promise<T>((resolve) => resolve(openings.run(pending, open, opening, begun))).finally(begun);
}

/** Marks `pending` taken; true the first time. The last opening taken turns the storage off. */
function take(pending: Pending): boolean {
  if (pending.taken) return false;
  pending.taken = true;
  if (--waiting === 0 && storageRunsHooks) openings.disable();
  return true;
}

/**
 * A store statement sent through `directStatements` failed with an error its driver adapter let
 * through unconverted (`cause`: pg's own, for a connection that ended), or was never sent (see
 * `TransactionClosedError`). Prisma would have wrapped the first in an error of its own; this says
 * the same: the error is the database's, not the resolver's.
 */
export class DirectStatementError extends Error {
  override name = 'DirectStatementError';
}

/** A statement sent on a transaction Prisma had already committed or rolled back. */
export class TransactionClosedError extends DirectStatementError {
  override name = 'TransactionClosedError';
  constructor() {
    super(
      'A query cannot be executed on a transaction that was rolled back or committed (expired transaction)',
    );
  }
}

interface AdapterTransaction extends AdapterQueries {
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/**
 * A statement that ends the transaction: how Prisma ends one through the adapter, when the adapter
 * does not do it itself, and every other spelling a resolver could send (PostgreSQL's `END` and
 * `ABORT`, `WORK` or `TRANSACTION`, `AND [NO] CHAIN`, MySQL's `[NO] RELEASE`, comments before it).
 * Group 1: the verb; `COMMIT` and `END` commit.
 */
const ENDING =
  /^(?:\s|\/\*[\s\S]*?\*\/|--[^\n]*(?:\n|$))*(COMMIT|END|ROLLBACK|ABORT)(?:\s+(?:WORK|TRANSACTION))?(?:\s+AND\s+(?:NO\s+)?CHAIN)?(?:\s+(?:NO\s+)?RELEASE)?\s*;?\s*$/i;
const COMMITS = new Set(['COMMIT', 'END']);

/**
 * The driver adapter factory `factory`, whose transactions the Prisma store can send its own
 * statements through directly: a transactional call's claim and its result skip Prisma's client
 * runtime (a fresh key in process takes about 0.7 of the time; see the README's Benchmarks). Prisma
 * still runs everything else, the resolver's statements, `BEGIN` and `COMMIT` included:
 *
 * ```ts
 * const prisma = new PrismaClient({ adapter: directStatements(new PrismaPg(pool)) });
 * ```
 *
 * The store's statements then do not reach Prisma's query log, extensions or tracing. A statement
 * the store would send after Prisma ended the transaction (its `timeout` passed) fails instead, as
 * Prisma's own would. Without it the store sends them through the transaction client, as a
 * resolver does. `adapterForUrl`'s factories come wrapped.
 *
 * Once a factory is wrapped, the store opens its transactions in an `AsyncLocalStorage`. On Node 20
 * and 22 one that is on runs a hook for every promise of the process (`npm run bench:async-context`),
 * so it is on only from a store transaction's `$transaction` call until its adapter starts the
 * transaction.
 */
export function directStatements<Factory extends DriverAdapterFactory>(factory: Factory): Factory {
  wrapping = true;
  return withMethods(factory, {
    async connect(connect, ...args) {
      const adapter = (await connect(...args)) as object;
      return withMethods(adapter, {
        async startTransaction(start, ...args) {
          // The first transaction started in an opening is the store's; any other is not handed over.
          const pending = openings.getStore();
          const mine = pending !== undefined && take(pending);
          const transaction = (await start(...args)) as AdapterTransaction;
          if (!mine) return transaction;
          const { opening } = pending;
          // MySQL/MariaDB end the whole transaction at a conflict, and the session goes on outside
          // it; PostgreSQL's goes on inside it (rolled back to a savepoint), or fails.
          const endsAtConflict = (adapter as { provider?: string }).provider === 'mysql';
          const { prismaSide, direct, wentOnAfterConflict, wroteOutside, seal, workEnded } = guarded(
            transaction,
            endsAtConflict,
          );
          opening.direct = direct;
          opening.wentOnAfterConflict = wentOnAfterConflict;
          opening.wroteOutside = wroteOutside;
          opening.seal = seal;
          opening.workEnded = workEnded;
          opening.adapterName = (transaction as { adapterName?: string }).adapterName;
          return prismaSide;
        },
      });
    },
  });
}

/**
 * `transaction` for Prisma, which marks it closed as Prisma ends it, and the store's raw queries on
 * it, which fail once it is closed: the connection goes back to the pool then, and a statement
 * sent on it would run outside the transaction, or in another one. Once sealed, Prisma's side
 * refuses every statement but the transaction's end. Until the work ended, it refuses a `COMMIT`:
 * Prisma sends its own only after the work, so one before is the resolver's, which would commit
 * the claim and the resolver's writes without the result (the store's own statement after it
 * refused), and a retry would find the key free to take over.
 */
function guarded(
  transaction: AdapterTransaction,
  endsAtConflict: boolean,
): {
  prismaSide: AdapterTransaction;
  direct: AdapterQueries;
  wentOnAfterConflict: (() => boolean) | undefined;
  wroteOutside: (() => boolean) | undefined;
  seal: () => () => void;
  workEnded: () => void;
} {
  let closed = false;
  let working = true;
  let sealed = false;
  let conflicted = false;
  let wentOn = false;
  const ended: Replacement = (original) => {
    closed = true;
    return original();
  };
  // Whether the driver shows the server's status flags: read once the transaction has begun.
  const observable = endsAtConflict && inTransaction(transaction) === true;
  let outsideWrite = false;
  /** A statement's outcome, noted: one that ran after a conflict means somebody caught it and went on. */
  const noted = async (sent: Promise<unknown>, sql: string): Promise<unknown> => {
    try {
      const result = await sent;
      if (conflicted) wentOn = true;
      // Read as the answer arrives: a later statement's answer can only say "outside" too, once the
      // database has ended the transaction (nothing begins another one but Prisma), so a late read
      // errs on the side of "wrote outside".
      if (observable && inTransaction(transaction) !== true && !PLAIN_SELECT.test(sql)) outsideWrite = true;
      return result;
    } catch (error) {
      if (isWriteConflict(error)) conflicted = true;
      throw error;
    }
  };
  const watched: Replacement = (original, query) => {
    const { sql } = query as { sql: string };
    const ending = ENDING.exec(sql);
    if (ending) {
      if (working && COMMITS.has(ending[1]!.toUpperCase())) return Promise.reject(new CommitRefusedError());
      closed = true;
      return original(query);
    }
    // Prisma's own plan may go on after Prisma ended the transaction (its timeout): the connection
    // is back in the pool then, and the statement would run outside the transaction.
    const refused = refusal();
    if (refused) return Promise.reject(refused);
    return endsAtConflict ? noted(original(query), sql) : original(query);
  };
  /** Why a statement of Prisma's is not sent now, if it is not. */
  const refusal = () =>
    closed ? new TransactionClosedError() : sealed ? new SealedTransactionError() : undefined;
  // A nested transaction's savepoints, which the adapter sends past its own `executeRaw`. Once
  // sealed, one begun before is already undone (the store went back to a savepoint of its own, taken
  // earlier): ending it sends nothing, where the database would refuse it, savepoint gone.
  const savepoint =
    (ends: boolean): Replacement =>
    (original, ...args) => {
      if (ends && sealed && !closed) return Promise.resolve();
      const refused = refusal();
      return refused ? Promise.reject(refused) : original(...args);
    };
  const prismaSide = withMethods(transaction, {
    commit: ended,
    rollback: ended,
    executeRaw: watched,
    queryRaw: watched,
    createSavepoint: savepoint(false),
    rollbackToSavepoint: savepoint(true),
    releaseSavepoint: savepoint(true),
  });
  const sent = async <T>(send: () => Promise<T>): Promise<T> => {
    if (closed) throw new TransactionClosedError();
    try {
      return await send();
    } catch (error) {
      if (error instanceof Error && error.name === 'DriverAdapterError') throw error;
      throw new DirectStatementError(error instanceof Error ? error.message : String(error), {
        cause: error,
      });
    }
  };
  const direct: AdapterQueries = {
    queryRaw: (query) => sent(() => transaction.queryRaw(query)),
    executeRaw: (query) => sent(() => transaction.executeRaw(query)),
  };
  return {
    prismaSide,
    direct,
    wentOnAfterConflict: endsAtConflict ? () => wentOn : undefined,
    wroteOutside: observable ? () => outsideWrite : undefined,
    seal: () => {
      sealed = true;
      return () => {
        sealed = false;
      };
    },
    workEnded: () => {
      working = false;
    },
  };
}

/**
 * A `COMMIT` the resolver sent on the store's transaction: not sent. The store commits the
 * transaction itself, once the result is stored with the resolver's writes.
 */
export class CommitRefusedError extends Error {
  override name = 'CommitRefusedError';
  constructor() {
    super(
      "The resolver sent COMMIT on the idempotency store's transaction: it was not sent. The store commits the transaction itself, with the key's result, once the resolver returns; a COMMIT before would commit the mutation without it",
    );
  }
}

/**
 * A statement that only reads: a `SELECT` with no `INTO` (a file or variables). A `SELECT` that
 * calls a stored function which writes is not told apart: like a statement that commits implicitly,
 * the store does not support one in the resolver's transaction.
 */
const PLAIN_SELECT = /^\s*\(?\s*SELECT\b(?![\s\S]*\bINTO\b)/i;

/** MySQL's `SERVER_STATUS_IN_TRANS`, in the status flags of every OK and EOF packet. */
const SERVER_STATUS_IN_TRANS = 1;

/**
 * Whether the session of a `@prisma/adapter-mariadb` transaction was in a transaction when the
 * server last answered on it, as the `mariadb` connector read the answer's status flags; `undefined`
 * where the driver does not show them.
 */
function inTransaction(transaction: object): boolean | undefined {
  const { conn, client } = transaction as { conn?: unknown; client?: unknown };
  for (const connection of [conn, client]) {
    const status = (connection as { info?: { status?: unknown } } | undefined)?.info?.status;
    if (typeof status === 'number') return (status & SERVER_STATUS_IN_TRANS) !== 0;
  }
  return undefined;
}

/**
 * A statement of the resolver's sent after it failed with an error the store keeps in its place
 * (a concurrent branch of the resolver still writing): refused, so it never commits with that error.
 */
export class SealedTransactionError extends Error {
  override name = 'SealedTransactionError';
  constructor() {
    super('The resolver failed, and its transaction now keeps only its error: this statement was not sent');
  }
}

/** A method in place of another, which it is given bound to its object. */
export type Replacement = (
  original: (...args: unknown[]) => Promise<unknown>,
  ...args: unknown[]
) => Promise<unknown>;

/**
 * `target` seen through a proxy whose methods named in `replacements` run those instead. Each
 * method is bound once, and again only if the object's member changes: Prisma reads the adapter's
 * methods on every statement.
 */
export function withMethods<T extends object>(target: T, replacements: Record<string, Replacement>): T {
  const methods = new Map<string | symbol, { value: unknown; method: unknown }>();
  return new Proxy(target, {
    get(object, property) {
      const value: unknown = Reflect.get(object, property, object);
      if (typeof value !== 'function') return value;
      const known = methods.get(property);
      if (known?.value === value) return known.method;
      const bound = value.bind(object) as (...args: unknown[]) => Promise<unknown>;
      const replacement = Object.hasOwn(replacements, property)
        ? replacements[property as string]
        : undefined;
      const method = replacement ? (...args: unknown[]) => replacement(bound, ...args) : bound;
      methods.set(property, { value, method });
      return method;
    },
  });
}
