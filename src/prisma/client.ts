/**
 * The parts of a Prisma client this library calls, typed structurally so that a client generated
 * to any `output` path, extended with `$extends` or not, is accepted.
 */

/** What both the client and its interactive-transaction client offer. */
export interface PrismaQueryable {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
  $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number>;
}

/** Options of an interactive transaction, as Prisma takes them. */
export interface PrismaTransactionOptions {
  /** Longest wait for a connection from the pool, in ms. */
  maxWait?: number | undefined;
  /** Longest the whole transaction may take, in ms. */
  timeout?: number | undefined;
  /** e.g. `'Serializable'`; the database's default when unset. */
  isolationLevel?: string | undefined;
}

/** A Prisma client: raw queries plus the interactive `$transaction`. */
export interface PrismaClientLike extends PrismaQueryable {
  // biome-ignore lint/suspicious/noExplicitAny: Prisma's own options type is an enum we cannot name.
  $transaction<R>(fn: (tx: any) => PromiseLike<R>, options?: any): PromiseLike<R>;
}

/** The transaction client type of a Prisma client: what the resolver receives as `ctx.tx`. */
export type TransactionClientOf<Client> = Client extends {
  $transaction<R>(fn: (tx: infer Tx) => PromiseLike<R>, options?: infer _O): PromiseLike<R>;
}
  ? Tx
  : never;

/** The databases the store speaks to. */
export type Provider = 'sqlite' | 'postgresql' | 'mysql' | 'cockroachdb';

/** Reads the provider a Prisma client was generated for (works through `$extends` proxies). */
export function providerOf(prisma: PrismaQueryable): Provider {
  const provider = (prisma as { _activeProvider?: unknown })._activeProvider;
  if (
    provider === 'sqlite' ||
    provider === 'postgresql' ||
    provider === 'mysql' ||
    provider === 'cockroachdb'
  ) {
    return provider;
  }
  throw new TypeError(
    `Cannot tell which database this Prisma client is for (got ${String(provider)}); pass { provider }`,
  );
}
