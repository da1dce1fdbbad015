import { Decimal } from '@prisma/client/runtime/client';
import { IdempotencyKeyInProgressError, IdempotencyKeyInvalidError } from '../core/errors.js';
import { withLocalCache } from '../core/record-cache.js';
import { type Serializer, superjsonSerializer } from '../core/serializer.js';
import type {
  ClaimOutcome,
  LeaseOperations,
  ModeDefaults,
  StepOperations,
  Store,
  TransactionSession,
} from '../core/store.js';
import { type AdapterQueries, queryableOf } from './adapter-queryable.js';
import {
  type PrismaClientLike,
  type PrismaQueryable,
  type PrismaTransactionOptions,
  type Provider,
  providerOf,
  type TransactionClientOf,
} from './client.js';
import {
  abortedByDatabase,
  asStoreError,
  classify,
  databaseCodeIn,
  databaseErrorIn,
  isTimeout,
  retryingTransaction,
  standalone,
  unavailableOnConnectionError,
} from './database-errors.js';
import { openTransaction, sendsInOrder } from './direct-statements.js';
import { recordStatements } from './record-sql.js';
import { adapterSchemaOf, RECORDS_TABLE, storeTables } from './records-table.js';
import { toDate, toRecord } from './row.js';
import { type Sql, textFor } from './sql.js';
import { stepStatements } from './step-sql.js';

/** `VARCHAR(255)` in the MySQL migration (an index limit). */
const MYSQL_KEY_COLUMN = 255;

/**
 * Options of `prismaStore`. `mode`, `leaseMs` and `heartbeatMs` are defaults for every call using
 * the store (e.g. `mode: 'lease'` for a store that serves a payment gateway); a call's own win.
 */
export interface PrismaStoreOptions extends ModeDefaults {
  /** The database, when it cannot be read off the client. @default the client's generated provider */
  provider?: Provider | undefined;
  /**
   * The records table, `name` or `schema.name` (quoted as written). A bare name is looked up in the
   * driver adapter's schema (`new PrismaPg(…, { schema: 'app' })`), where the client's models go.
   * @default 'idempotency_records', in the adapter's schema if it has one, else on the search path
   */
  table?: string;
  /**
   * Options of the claim's interactive transaction. The timeout must cover the resolver and any
   * wait for a concurrent duplicate (`waitTimeoutMs`).
   * @default { maxWait: 5_000, timeout: 15_000 }
   */
  transaction?: PrismaTransactionOptions | undefined;
  /**
   * How many times a transaction that failed on a write conflict, deadlock or serialization
   * failure (Prisma `P2034`) is run again.
   * @default 3
   */
  maxRetries?: number | undefined;
  /**
   * Keep completed records in process memory so a local replay needs no query (see
   * `withLocalCache`: entries end by the database's clock, never later than their record).
   * @default off
   */
  localCache?: { max: number; maxBytes?: number | undefined } | undefined;
  /** @default superjson, with Prisma's `Decimal` */
  serializer?: Serializer | undefined;
  /**
   * A connected driver adapter on the database the client writes to (`await adapter.connect()` of
   * the factory the client was built with; one built on a pool shares that pool, one built on a
   * config opens its own). Reads outside a transaction (a retry's first read of its record, a
   * duplicate's re-reads, the steps of a call) go through it rather than the client, skipping
   * Prisma's client runtime: 0.1 to 0.2 ms a replay on PostgreSQL (`npm run bench`, in process).
   * Prisma's query log and extensions do not see these reads. You dispose it.
   * @default reads go through the client
   */
  reads?: AdapterQueries | undefined;
}

/** A Prisma-backed store; `TransactionClient` is what resolvers receive as `tx`. */
export type PrismaStore<TransactionClient> = Store<TransactionClient>;

/**
 * The store for a Prisma 7 client (any driver adapter): records live in `idempotency_records` (or
 * `table`), in the schema of the client's driver adapter.
 * Transactional mode claims the key, runs the resolver and stores its result in one interactive
 * transaction, so they commit or roll back together. Lease mode runs each step as one short
 * statement on `prisma` itself, which is also what its resolvers receive as `tx`.
 */
export function prismaStore<Client extends PrismaClientLike>(
  prisma: Client,
  options: PrismaStoreOptions = {},
): PrismaStore<TransactionClientOf<Client>> {
  type Tx = TransactionClientOf<Client>;
  const provider = options.provider ?? providerOf(prisma);
  const tables = storeTables(provider, options.table, adapterSchemaOf(prisma));
  const statements = recordStatements(provider, tables.records);
  const transactionOptions = { maxWait: 5_000, timeout: 15_000, ...options.transaction };
  const maxRetries = options.maxRetries ?? 3;
  const serializer = options.serializer ?? superjsonSerializer({ Decimal });

  // Statements outside a transaction that write stay on the client: lease steps on SQLite take its
  // transaction (see `standalone`).
  const reader = options.reads ? queryableOf(options.reads) : prisma;
  const rows = async (client: PrismaQueryable, { text, values }: Sql) => {
    const found = await client.$queryRawUnsafe<Record<string, unknown>[]>(textFor(provider, text), ...values);
    // Prisma answers a statement of a batch it stopped (another statement of the batch failed
    // first) with nothing at all.
    if (!Array.isArray(found)) throw notRun();
    return found;
  };
  const changes = (client: PrismaQueryable, { text, values }: Sql) =>
    client.$executeRawUnsafe(textFor(provider, text), ...values);
  const recordOf = async (client: PrismaQueryable, query: Sql) => {
    const [row] = await rows(client, query);
    return row ? toRecord(row) : null;
  };
  /**
   * The row an insert or update returned (`RETURNING`), or `undefined` when it changed none;
   * where an update cannot return (MySQL/MariaDB), it reads the row with `then()` afterwards.
   */
  const written = async (client: PrismaQueryable, query: Sql, then: () => Sql) => {
    if (statements.returningUpdates || query.text.startsWith('INSERT')) return (await rows(client, query))[0];
    if ((await changes(client, query)) === 0) return undefined;
    return (await rows(client, then()))[0];
  };
  const createdAt = async (client: PrismaQueryable, query: Sql, scope: string, key: string) => {
    const row = await written(client, query, () => statements.createdAt(scope, key));
    return row ? toDate(row.created_at) : null;
  };
  const completedTimes = async (client: PrismaQueryable, query: Sql, readBack: () => Sql) => {
    const row = await written(client, query, readBack);
    return row ? { completedAt: toDate(row.completed_at)!, expiresAt: toDate(row.expires_at)! } : null;
  };

  const store: PrismaStore<Tx> = {
    serializer,
    // One table however it is named: `idempotency_records` is the default's `"idempotency_records"`.
    backend: backendOf(
      prisma,
      storeTables(provider, options.table ?? RECORDS_TABLE, adapterSchemaOf(prisma)).records,
    ),
    defaults: { mode: options.mode, leaseMs: options.leaseMs, heartbeatMs: options.heartbeatMs },

    async find(scope, key) {
      storable(scope, key);
      return unavailableOnConnectionError(
        () => recordOf(reader, statements.find(scope, key)),
        transactionOptions.maxWait,
      );
    },

    transaction: (work) =>
      interactive(
        (tx, own, withCommit, seal, conflicted) => work(sessionOf(tx, own, withCommit, seal, conflicted)),
        {
          askIfAborted: true,
        },
      ),

    lease: leaseOperations(),
    steps: stepOperations(),
  };
  return options.localCache ? withLocalCache(store, options.localCache) : store;

  /**
   * Refuses, before anything runs, a scope or key that MySQL's columns cannot keep apart from
   * another: `INSERT IGNORE` would store a key over 255 characters truncated, and `utf8mb4_bin`
   * compares with trailing spaces ignored ("alice " would share "alice"'s records).
   */
  function storable(scope: string, key: string): void {
    if (provider !== 'mysql') return;
    if (key.length > MYSQL_KEY_COLUMN) {
      throw new IdempotencyKeyInvalidError(
        `The idempotency key is ${key.length} characters; the MySQL idempotency_key column holds ${MYSQL_KEY_COLUMN}`,
      );
    }
    if (scope.endsWith(' ') || key.endsWith(' ')) {
      throw new IdempotencyKeyInvalidError(
        `The idempotency ${scope.endsWith(' ') ? 'scope' : 'key'} ends in a space, which MySQL's utf8mb4_bin collation ignores in comparisons: it would share another's records`,
      );
    }
  }

  /**
   * Runs `work` in one interactive transaction, again after a write conflict (see
   * `retryingTransaction`; `askIfAborted`: whether the database aborted it when the work fails with
   * an error of its own). `own` is where the store's own statements go: straight to the driver
   * adapter's transaction when the client's adapter lets them (`directStatements`), else `tx`.
   *
   * `withCommit` takes a statement of the store's that `work` sent on PostgreSQL straight to
   * `@prisma/adapter-pg`'s transaction (which hands it to `pg` at once) and does not await: the
   * connection sends Prisma's `COMMIT` after it, and the transaction fails when it failed, as the
   * database then answered `COMMIT` with a rollback. Absent where a statement cannot be sent that
   * way: through the client (or another adapter) Prisma could send its `COMMIT` first;
   * MySQL/MariaDB and SQLite would commit the rest of the transaction without it.
   */
  function interactive<T>(
    work: (
      tx: Tx & PrismaQueryable,
      own: PrismaQueryable,
      withCommit?: WithCommit,
      seal?: () => () => void,
      conflicted?: (error: unknown) => void,
    ) => Promise<T>,
    { askIfAborted = false } = {},
  ): Promise<T> {
    return retryingTransaction(
      async (inside) => {
        let sentWithCommit: Promise<unknown> | undefined;
        /** A write conflict a statement of the store's met that the work did not throw (`savepoint`). */
        let conflict: unknown;
        const conflicted = (error: unknown) => {
          conflict ??= error;
        };
        const withCommit: WithCommit = (sent) => {
          sent.catch(() => undefined); // awaited below, unless the transaction fails first
          sentWithCommit = sent;
        };
        const settled = await openTransaction((opening, begun) =>
          prisma.$transaction((tx: Tx & PrismaQueryable) => {
            begun();
            const own = opening.direct ? queryableOf(opening.direct) : undefined;
            const ran = inside(
              () =>
                own
                  ? work(
                      tx,
                      own,
                      sendsInOrder(opening, provider) ? withCommit : undefined,
                      opening.seal,
                      conflicted,
                    )
                  : work(tx, tx),
              {
                // Asked on the store's own statements where it has them: a question sent through
                // the client would count as the work going on after a conflict, and a sealed
                // transaction refuses it.
                aborted: askIfAborted
                  ? async () => conflict ?? abortedByDatabase(own ?? tx, provider)
                  : undefined,
                wentOnAfterConflict: opening.wentOnAfterConflict,
                wroteOutside: opening.wroteOutside,
              },
            );
            // Prisma's COMMIT comes after the work; one before it is the resolver's (refused).
            return opening.workEnded ? ran.finally(opening.workEnded) : ran;
          }, transactionOptions),
        ).then(
          (value) => ({ value }),
          (error: unknown) => ({ error }),
        );
        // The result sent with COMMIT, answered before the COMMIT was, on the same connection.
        const failed = await sentWithCommit?.then(
          () => undefined,
          (failure: unknown) => failure,
        );
        // The database's own answer: the statement failed there, and COMMIT rolled back (`lazyBegin`
        // fails such a COMMIT): its failure says why (a write conflict, run again; the claim not found).
        if (failed !== undefined && databaseCodeIn(failed) !== undefined) throw failed;
        if ('error' in settled) throw settled.error;
        // A failure of the driver's (it stopped waiting, pg's `query_timeout`) leaves COMMIT's
        // outcome unknown, as a connection lost at COMMIT does: 503, and the same key replays or runs.
        if (failed !== undefined) throw asStoreError(failed, 'connection');
        return settled.value;
      },
      { maxRetries, busyWaitMs: transactionOptions.maxWait },
    );
  }

  /** Runs one lease step so that it commits on its own (see `standalone`). */
  function committed<T>(step: (client: PrismaQueryable) => PromiseLike<T>): Promise<T> {
    return standalone(prisma, provider, step, transactionOptions);
  }

  function leaseOperations(): LeaseOperations<Tx> {
    const changed = (query: Sql) => committed((client) => changes(client, query)).then((count) => count > 0);
    return {
      // Not a transaction client: in lease mode the resolver's writes commit on their own.
      client: prisma as unknown as Tx,
      async claim(claim): Promise<ClaimOutcome> {
        const { scope, key } = claim;
        storable(scope, key);
        // Each statement is atomic on its own; a record deleted between them (released, swept)
        // sends us round again, a few times at most.
        const outcome = await waitedOut(async () => {
          for (let attempt = 0; attempt < 5; attempt++) {
            const inserted = await committed((client) =>
              createdAt(client, statements.leaseClaim(claim), scope, key),
            );
            if (inserted) return { claimed: true, firstSeenAt: inserted, tookOver: false } as const;
            const tookOver = await committed((client) =>
              createdAt(client, statements.leaseTakeOver(claim), scope, key),
            );
            if (tookOver) return { claimed: true, firstSeenAt: tookOver, tookOver: true } as const;
            const existing = await committed((client) => recordOf(client, statements.find(scope, key)));
            if (existing) return { claimed: false, existing } as const;
          }
        });
        if (outcome) return outcome;
        throw new Error('Could not claim the idempotency key: its record keeps disappearing');
      },
      extend: (owner, leaseMs) => changed(statements.leaseExtend(owner, leaseMs)),
      complete: (completion) =>
        committed((client) =>
          completedTimes(client, statements.leaseComplete(completion), () =>
            statements.leaseCompletedTimes(completion),
          ),
        ),
      release: (owner) => changed(statements.leaseRelease(owner)),
    };
  }

  /** Steps in `idempotency_steps`: each write one statement, fenced by the record's owner token. */
  function stepOperations(): StepOperations<Tx> {
    const steps = stepStatements(provider, tables);
    return {
      async list(scope, key) {
        storable(scope, key);
        const found = await unavailableOnConnectionError(
          () => rows(reader, steps.list(scope, key)),
          transactionOptions.maxWait,
        );
        return found.map((row) => ({
          name: String(row.name),
          position: Number(row.ordinal),
          fingerprint: String(row.fingerprint),
          result: String(row.result),
          resultIsError: row.result_is_error === true || Number(row.result_is_error) === 1,
          completedAt: toDate(row.created_at) ?? new Date(0),
          liveForMs: row.live_for_ms === null || row.live_for_ms === undefined ? 0 : Number(row.live_for_ms),
        }));
      },
      save: (step) => committed((client) => changes(client, steps.save(step))).then((count) => count > 0),
      async clear(owner) {
        await committed((client) => changes(client, steps.clear(owner)));
      },
      async keep(owner) {
        await committed((client) => changes(client, steps.keep(owner)));
      },
      // Asked whether the database ended the transaction when the step fails: a save that found
      // the session out of it (`saveInTransaction`) is then the outcome unknown, not a lost lease.
      transaction: (work) =>
        interactive(
          (tx, own) =>
            work({ tx, save: async (step) => (await changes(own, steps.saveInTransaction(step))) > 0 }),
          { askIfAborted: true },
        ),
    };
  }

  /**
   * The claim's transaction: `tx` for the resolver, `own` for the store's statements, `withCommit`
   * for a completion sent with the commit, `seal` to refuse the resolver's statements from then on
   * (see `interactive`; both only where the store's statements skip the client).
   */
  function sessionOf(
    tx: Tx,
    own: PrismaQueryable,
    withCommit: WithCommit | undefined,
    seal: (() => () => void) | undefined,
    conflicted?: (error: unknown) => void,
  ): TransactionSession<Tx> {
    // The spread last: members defined after one take V8's slow path (see `withMembers`).
    return {
      tx,
      completesWithCommit: withCommit !== undefined,
      async claim(claim) {
        const { scope, key } = claim;
        storable(scope, key);
        const outcome = await waitedOut(async () => {
          for (let attempt = 0; attempt < 3; attempt++) {
            const firstSeenAt = await createdAt(own, statements.claim(claim), scope, key);
            if (firstSeenAt) return { claimed: true, firstSeenAt, tookOver: false } as const;
            const existing = await recordOf(own, statements.findLocked(scope, key));
            if (existing) return { claimed: false, existing } as const;
            // Gone between the two statements (swept, or its lease released): claim again.
          }
        });
        if (outcome) return outcome;
        // A conflict on a row that cannot be read back: the column is narrower than the value
        // (MySQL's INSERT IGNORE truncates with a warning instead of failing), or it compares
        // case- or accent-insensitively and holds another caller's key.
        throw new Error(
          `Cannot claim the idempotency key: a row conflicts but cannot be read back; are the idempotency_records columns narrower than the scope, key or operation, or not of a binary collation?`,
        );
      },
      async takeOver(claim) {
        const firstSeenAt = await createdAt(own, statements.takeOver(claim), claim.scope, claim.key);
        if (!firstSeenAt) throw new Error('The idempotency record to take over is gone');
        return firstSeenAt;
      },
      complete(completion) {
        const { scope, key } = completion;
        // Failing rolls the resolver's writes back with the claim: never an effect without its record.
        const completed = completedTimes(own, statements.complete(completion), () =>
          statements.completedTimes(scope, key),
        ).then(
          (times) => times ?? Promise.reject(claimNotFound()),
          (error: unknown) => {
            const code = databaseCodeIn(error);
            // PostgreSQL's statement fails when it finds no claim (see `recordStatements`).
            if (code === DIVISION_BY_ZERO) throw claimNotFound(error);
            if (code === IN_FAILED_TRANSACTION) throw abortedBeforeCompletion(error);
            throw error;
          },
        );
        withCommit?.(completed);
        return completed;
      },
      ...(seal && { savepoint: () => savepoint((sql) => changes(own, sql), withCommit, seal, conflicted) }),
    };
  }
}

/** Takes a statement sent but not awaited, to be awaited once the transaction committed. */
type WithCommit = (sent: Promise<unknown>) => void;

/**
 * Marks where the resolver's writes begin, and returns the way back there for a replayable error
 * (see `TransactionSession.savepoint`). Going back seals the transaction first: a statement a branch
 * of the resolver still running sends afterwards is refused, never to commit with the error, and
 * one it sent before comes ahead of the rollback on the connection, which undoes it.
 */
async function savepoint(
  send: (statement: Sql) => PromiseLike<unknown>,
  withCommit: WithCommit | undefined,
  seal: () => () => void,
  /** Told of a write conflict going back met: the runner throws the resolver's error, not it. */
  conflicted?: (error: unknown) => void,
): Promise<(error: unknown) => Promise<boolean>> {
  const marked = Promise.resolve(send({ text: 'SAVEPOINT idempotency_claimed', values: [] }));
  // Sent in order with the resolver's statements (as a completion with the commit): not waited for.
  // Should it fail, the transaction is aborted and every statement after it fails too.
  if (withCommit) marked.catch(() => undefined);
  else await marked;
  return async (error) => {
    // A failure the store answers itself (a write conflict it runs again, the database gone, the
    // transaction expired): not kept, but thrown to `retryingTransaction` as any error is.
    const database = databaseErrorIn(error);
    if (database !== undefined && classify(database) !== undefined) return false;
    const unseal = seal();
    try {
      await marked;
      await send({ text: 'ROLLBACK TO SAVEPOINT idempotency_claimed', values: [] });
    } catch (failure) {
      // Not kept here: the transaction rolls back as after any error, its statements (the question
      // whether the database had aborted it) Prisma's again. A write conflict met here (a
      // background abort, noticed on the way back) says the database had aborted it.
      if (classify(databaseErrorIn(failure)) === 'writeConflict') conflicted?.(failure);
      unseal();
      throw failure;
    }
    return true;
  };
}

/**
 * A statement of the store's that Prisma did not run: it sent it in one batch with a statement of
 * the resolver's that the resolver did not await, which failed first. The transaction rolls back.
 */
function notRun(): Error {
  return new Error(
    "Prisma did not run the idempotency store's statement: a statement sent beside it (one of the resolver's that it did not await?) failed first. Nothing was committed: await every statement of the resolver",
  );
}

/** PostgreSQL's `division_by_zero`, which its completion raises when it finds no claim. */
const DIVISION_BY_ZERO = '22012';

function claimNotFound(cause?: unknown): Error {
  return new Error('The idempotency claim was not found to store its result', { cause });
}

/** PostgreSQL's `in_failed_sql_transaction`: a statement before this one failed. */
const IN_FAILED_TRANSACTION = '25P02';

/**
 * The completion of a transaction PostgreSQL had aborted: a statement of the resolver's failed, and
 * the resolver caught its error and returned (a unique violation caught to answer "already there").
 * Its commit rolls back.
 */
function abortedBeforeCompletion(cause: unknown): Error {
  return new Error(
    "The result cannot be stored: PostgreSQL had aborted the transaction after a statement of the resolver's failed and the resolver caught its error and went on. Nothing was committed. Let that error through, or send a statement that does not fail on the conflict (createMany with skipDuplicates, INSERT … ON CONFLICT DO NOTHING)",
    { cause },
  );
}

/**
 * Runs a claim's statements. They wait for a transaction that holds the key's row (a transactional
 * claim, a takeover); a lock or statement timeout of the session that ends that wait means the
 * holder is still running, and the claim throws `IdempotencyKeyInProgressError` (a statement timeout
 * may also end a claim that was only slow: nothing was written either way).
 */
async function waitedOut<T>(claim: () => Promise<T>): Promise<T> {
  try {
    return await claim();
  } catch (error) {
    if (!isTimeout(error)) throw error;
    throw new IdempotencyKeyInProgressError(0, {
      message: 'The database stopped waiting for the transaction that holds the idempotency key',
      cause: error,
    });
  }
}

/** One object per client and records table (`backendOf`). */
const backends = new WeakMap<object, Map<string, object>>();

/**
 * What stores over `prisma` on the records table `table` share: calls of this process wait in
 * memory for the holders of their key there, and only there (a key of another table is another
 * record, held by nobody here). A table is told by its name as the stores give it (quoted, with
 * the adapter's schema): stores that spell one table two ways (`public.idempotency_records` beside
 * the default) do not wait for each other in memory, only in the database.
 */
function backendOf(prisma: object, table: string): object {
  let tables = backends.get(prisma);
  if (!tables) {
    tables = new Map();
    backends.set(prisma, tables);
  }
  let backend = tables.get(table);
  if (!backend) {
    backend = { table };
    tables.set(table, backend);
  }
  return backend;
}
