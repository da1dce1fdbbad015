// Counts the database errors a Prisma client raises, by where they surfaced, before the store
// retries or maps them: how a cluster's conflicts reach the application.
import type { PrismaClientLike } from 'idempotent-mutations/prisma';

/**
 * Error counts by place and code, e.g. `commit 1213`, `statement in transaction SELECT 1213`,
 * `model query in transaction 1213`, `statement INSERT 1213` (autocommitted).
 */
export type ConflictCounts = Record<string, number>;

/**
 * The database's own error code under a Prisma error: P2010's `meta.code`, a driver adapter's
 * error (`meta.driverAdapterError`, its `cause.originalCode`), else Prisma's code or the error kind.
 */
function databaseCode(error: unknown, depth = 0): string | undefined {
  if (!error || typeof error !== 'object' || depth > 4) return undefined;
  const { code, meta, cause, kind, originalCode } = error as Record<string, unknown> & {
    meta?: Record<string, unknown>;
  };
  if (originalCode !== undefined) return String(originalCode);
  if (meta?.code !== undefined) return String(meta.code);
  return (
    databaseCode(meta?.driverAdapterError, depth + 1) ??
    databaseCode(cause, depth + 1) ??
    (code !== undefined ? String(code) : typeof kind === 'string' ? kind : undefined)
  );
}

/** `prisma`, with every raw statement and transaction watched; `counts` fills as errors pass. */
export function countingConflicts<Client extends PrismaClientLike>(
  prisma: Client,
): { client: Client; counts: ConflictCounts } {
  const counts: ConflictCounts = {};
  const seen = new WeakSet<object>();
  const note = (place: string, error: unknown) => {
    if (error && typeof error === 'object') {
      if (seen.has(error)) return;
      seen.add(error);
    }
    const name = `${place} ${databaseCode(error) ?? (error as Error)?.message?.split('\n').pop()}`;
    counts[name] = (counts[name] ?? 0) + 1;
  };
  const watch = <T extends object>(target: T, place: string): T =>
    new Proxy(target, {
      get(object, property, receiver) {
        const value = Reflect.get(object, property, receiver);
        if (typeof value !== 'function') return value;
        if (property === '$queryRawUnsafe' || property === '$executeRawUnsafe') {
          return (...args: unknown[]) =>
            Promise.resolve(value.apply(object, args)).catch((error: unknown) => {
              note(`${place} ${String(args[0]).split(' ')[0]}`, error);
              throw error;
            });
        }
        if (property === '$transaction') {
          return (work: (tx: object) => unknown, options?: unknown) =>
            Promise.resolve(
              value.call(
                object,
                // Whatever fails inside and was not seen on a raw statement came from a model
                // query (the resolver's `tx.payment.create`).
                (tx: object) =>
                  Promise.resolve(work(watch(tx, 'statement in transaction'))).catch((error: unknown) => {
                    note('model query in transaction', error);
                    throw error;
                  }),
                options,
              ),
            ).catch((error: unknown) => {
              // Not seen on a statement: it surfaced opening or committing the transaction.
              note('commit', error);
              throw error;
            });
        }
        return value.bind(object);
      },
    });
  return { client: watch(prisma, 'statement'), counts };
}
