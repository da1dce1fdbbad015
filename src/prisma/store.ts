import { Decimal } from '@prisma/client/runtime/client';
import { IdempotencyKeyInvalidError } from '../core/errors.js';
import { RecordCache } from '../core/record-cache.js';
import { type Serializer, superjsonSerializer } from '../core/serializer.js';
import type { LeaseOperations, ModeDefaults, Store, TransactionSession } from '../core/store.js';
import {
  type PrismaClientLike,
  type PrismaQueryable,
  type PrismaTransactionOptions,
  type Provider,
  providerOf,
  type TransactionClientOf,
} from './client.js';
import { retryingTransaction, standalone, unavailableOnConnectionError } from './database-errors.js';
import { dialectFor } from './dialect.js';
import { toRecord } from './row.js';

/** `VARCHAR(255)` in the MySQL migration (an index limit). */
const MYSQL_KEY_COLUMN = 255;

/**
 * Options of `prismaStore`. `mode`, `leaseMs` and `heartbeatMs` are defaults for every call using
 * the store (e.g. `mode: 'lease'` for a store that serves a payment gateway); a call's own win.
 */
export interface PrismaStoreOptions extends ModeDefaults {
  /** The database, when it cannot be read off the client. @default the client's generated provider */
  provider?: Provider;
  /**
   * Options of the claim's interactive transaction. The timeout must cover the resolver and any
   * wait for a concurrent duplicate (`waitTimeoutMs`).
   * @default { maxWait: 5_000, timeout: 15_000 }
   */
  transaction?: PrismaTransactionOptions;
  /**
   * How many times a transaction that failed on a write conflict, deadlock or serialization
   * failure (Prisma `P2034`) is run again.
   * @default 3
   */
  maxRetries?: number;
  /** Keep completed records in process memory so a local replay needs no query. @default off */
  localCache?: { max: number };
  /** @default superjson, with Prisma's `Decimal` */
  serializer?: Serializer;
}

/** A Prisma-backed store; `TransactionClient` is what resolvers receive as `tx`. */
export type PrismaStore<TransactionClient> = Store<TransactionClient>;

/**
 * The store for a Prisma 7 client (any driver adapter): records live in `idempotency_records`.
 * Transactional mode claims the key, runs the resolver and stores its result in one interactive
 * transaction, so they commit or roll back together. Lease mode runs each step as one short
 * statement on `prisma` itself, which is also what its resolvers receive as `tx`.
 */
export function prismaStore<Client extends PrismaClientLike>(
  prisma: Client,
  options: PrismaStoreOptions = {},
): PrismaStore<TransactionClientOf<Client>> {
  const provider = options.provider ?? providerOf(prisma);
  const sql = dialectFor(provider);
  const transactionOptions = { maxWait: 5_000, timeout: 15_000, ...options.transaction };
  const maxRetries = options.maxRetries ?? 3;
  const cache = options.localCache ? new RecordCache(options.localCache.max) : undefined;
  const serializer = options.serializer ?? superjsonSerializer({ Decimal });
  const bool = (value: boolean) =>
    provider === 'postgresql' || provider === 'cockroachdb' ? value : value ? 1 : 0;

  const read = async (client: PrismaQueryable, query: string, scope: string, key: string) => {
    const rows = await client.$queryRawUnsafe<Record<string, unknown>[]>(query, scope, key);
    return rows[0] ? toRecord(rows[0]) : null;
  };

  return {
    serializer,
    backend: prisma,
    defaults: { mode: options.mode, leaseMs: options.leaseMs, heartbeatMs: options.heartbeatMs },

    async find(scope, key) {
      storable(scope, key);
      const cached = cache?.get(scope, key);
      if (cached) return cached;
      const record = await unavailableOnConnectionError(() => read(prisma, sql.find, scope, key));
      if (record) cache?.remember(record);
      return record;
    },

    transaction(work) {
      return retryingTransaction(
        (inside) =>
          prisma.$transaction(
            (tx: TransactionClientOf<Client> & PrismaQueryable) => inside(() => work(sessionOf(tx))),
            transactionOptions,
          ),
        { maxRetries, busyWaitMs: transactionOptions.maxWait },
      );
    },

    lease: leaseOperations(),
  };

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

  /** Runs one lease step so that it commits on its own (see `standalone`). */
  function committed<T>(step: (client: PrismaQueryable) => PromiseLike<T>): Promise<T> {
    return standalone(prisma, provider, step, transactionOptions);
  }

  function leaseOperations(): LeaseOperations<TransactionClientOf<Client>> {
    const changed = (query: string, ...values: unknown[]) =>
      committed((client) => client.$executeRawUnsafe(query, ...values)).then((rows) => rows > 0);
    return {
      // Not a transaction client: in lease mode the resolver's writes commit on their own.
      client: prisma as unknown as TransactionClientOf<Client>,
      async claim(claim) {
        const { scope, key, operation, fingerprint, ownerToken, lockedUntil, now, expiresAt } = claim;
        storable(scope, key);
        // Each statement is atomic on its own; a record deleted between them (released, swept)
        // sends us round again, a few times at most.
        for (let attempt = 0; attempt < 5; attempt++) {
          const args = [operation, fingerprint, ownerToken, lockedUntil, now, expiresAt];
          if (await changed(sql.leaseClaim, scope, key, ...args)) return { claimed: true, tookOver: false };
          if (await changed(sql.leaseTakeOver, ...args, scope, key, now, now)) {
            return { claimed: true, tookOver: true };
          }
          const existing = await committed((client) => read(client, sql.find, scope, key));
          if (existing) return { claimed: false, existing };
        }
        throw new Error(`Could not claim the idempotency key (${scope}, ${key}): it keeps disappearing`);
      },
      extend: (owner, lockedUntil) =>
        changed(sql.leaseExtend, lockedUntil, owner.scope, owner.key, owner.ownerToken),
      complete: (c) =>
        changed(
          sql.leaseComplete,
          c.result,
          bool(c.resultIsError),
          c.completedAt,
          c.expiresAt,
          c.scope,
          c.key,
          c.ownerToken,
        ),
      release: (owner) => changed(sql.leaseRelease, owner.scope, owner.key, owner.ownerToken),
    };
  }

  function sessionOf(
    tx: TransactionClientOf<Client> & PrismaQueryable,
  ): TransactionSession<TransactionClientOf<Client>> {
    return {
      tx,
      async claim(claim) {
        storable(claim.scope, claim.key);
        for (let attempt = 0; attempt < 3; attempt++) {
          const inserted = await tx.$executeRawUnsafe(
            sql.claim,
            claim.scope,
            claim.key,
            claim.operation,
            claim.fingerprint,
            claim.now,
            claim.expiresAt,
          );
          if (inserted > 0) return { claimed: true };
          const existing = await read(tx, sql.findLocked, claim.scope, claim.key);
          if (existing) return { claimed: false, existing };
          // Gone between the two statements (swept, or its lease released): claim again.
        }
        // A conflict on a row that cannot be read back: the column is narrower than the value
        // (MySQL's INSERT IGNORE truncates with a warning instead of failing).
        throw new Error(
          `Cannot claim (${claim.scope}, ${claim.key}): a row conflicts but cannot be read back; are the idempotency_records columns narrower than the scope, key or operation?`,
        );
      },
      async takeOver(claim) {
        await tx.$executeRawUnsafe(
          sql.takeOver,
          claim.operation,
          claim.fingerprint,
          claim.now,
          claim.expiresAt,
          claim.scope,
          claim.key,
        );
      },
      async complete(completion) {
        const updated = await tx.$executeRawUnsafe(
          sql.complete,
          completion.result,
          bool(completion.resultIsError),
          completion.completedAt,
          completion.expiresAt,
          completion.scope,
          completion.key,
        );
        // Throwing rolls the resolver's writes back with the claim: never an effect without its record.
        if (updated !== 1) {
          throw new Error(
            `The claim of (${completion.scope}, ${completion.key}) was not found to store its result`,
          );
        }
      },
    };
  }
}
