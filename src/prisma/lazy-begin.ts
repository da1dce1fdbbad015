import type { Writable } from 'node:stream';

/**
 * The part of a `pg` client class `lazyBegin` needs: `pg.Client` itself, or a subclass of it.
 * Structural, so this package needs no `pg` import (nor its types) to offer it.
 */
export interface PgClientClass {
  // biome-ignore lint/suspicious/noExplicitAny: a mixin's base class must take `...args: any[]`, and pg's query is overloaded.
  new (...args: any[]): { query(...args: any[]): any; readonly pipeline?: boolean };
}

/** What a `BEGIN` answered at once resolves to: the result `pg` gives for it. */
const begun = { command: 'BEGIN', rowCount: null, oid: null, rows: [], fields: [] } as const;

/** A statement that ends a transaction by committing it. */
const COMMIT = /^\s*(?:COMMIT|END)\b/i;

/**
 * A `COMMIT`'s result, or the failure it stands for: PostgreSQL answers the `COMMIT` of a
 * transaction it had aborted with the tag `ROLLBACK`, not an error (a statement sent without
 * waiting for its answer, such as a resolver's unawaited write, failed after the last one awaited),
 * and nothing committed, which must not read as a commit.
 */
function committed(result: unknown): unknown {
  if ((result as { command?: unknown } | null)?.command !== 'ROLLBACK') return result;
  throw Object.assign(
    new Error(
      'COMMIT rolled the transaction back: PostgreSQL had aborted it after a statement failed (one sent without awaiting its answer?). Nothing was committed',
    ),
    // As PostgreSQL reports a statement in an aborted transaction (`in_failed_sql_transaction`).
    { code: '25P02', severity: 'ERROR' },
  );
}

/**
 * `Client` (`pg.Client`) with each transaction's `BEGIN` answered at once instead of after a round
 * trip: on a pipelining connection (`pipeline: true`, pg 8.23 and later) `BEGIN` is written to the
 * server straight away and the transaction's first statement follows it on the wire, so the two
 * share one round trip. Prisma's `PrismaPg` awaits `BEGIN` before it runs the transaction's first
 * statement; with this client that wait is gone, which saves one round trip per interactive
 * transaction (the claim's, for an idempotent call):
 *
 * ```ts
 * const pool = new pg.Pool({ connectionString, pipeline: true, Client: lazyBegin(pg.Client) });
 * const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
 * ```
 *
 * Nothing runs outside the transaction: the statements that follow `BEGIN` are queued behind it on
 * the same connection, and `BEGIN` fails only when that connection fails, or is inside a failed
 * transaction, where every statement queued behind it fails too. Its failure is then the next
 * statement's. The statements a connection is given in one tick of the event loop also go out in
 * one socket write. Without `pipeline: true` (or on an older `pg`) the client is `pg.Client`
 * unchanged, but for one thing, on every `pg`: it listens for its connection's `'error'` from the
 * start. The pool takes its own listener off a connection as it hands it out, and `PrismaPg` adds one
 * only once it has it: a connection the server ended in between (both read in one chunk) emitted an
 * `'error'` nobody heard, which Node throws, ending the process. `pg` marks such a connection broken
 * all the same: its next query fails, and the pool drops it when it comes back.
 */
export function lazyBegin<C extends PgClientClass>(Client: C): C {
  return class LazyBeginClient extends Client {
    /** The unanswered `BEGIN`, whose failure belongs to the statement after it. */
    #begin: Promise<unknown> | undefined;
    /** Whether this tick's writes are being held back. */
    #corked = false;

    // biome-ignore lint/suspicious/noExplicitAny: a mixin's constructor must take `...args: any[]`.
    constructor(...args: any[]) {
      super(...args);
      (this as { on?: (event: 'error', listener: () => void) => unknown }).on?.('error', reportedByNextQuery);
    }

    override query(...args: unknown[]): unknown {
      const [config] = args;
      const text = typeof config === 'string' ? config : (config as { text?: unknown } | undefined)?.text;
      const promised =
        typeof args.at(-1) !== 'function' &&
        typeof (config as { submit?: unknown } | undefined)?.submit !== 'function';
      if (!this.pipeline || !promised) return super.query(...args);
      this.#corkForTick();
      if (typeof text === 'string' && /^\s*BEGIN\s*;?\s*$/i.test(text)) {
        const sent = super.query(...args) as Promise<unknown>;
        // Observed here so it is never unhandled; the next statement reports it.
        sent.catch(() => undefined);
        this.#begin = sent;
        return Promise.resolve({ ...begun, rows: [], fields: [] });
      }
      const begin = this.#begin;
      this.#begin = undefined;
      const next = super.query(...args) as Promise<unknown>;
      const answered =
        begin === undefined
          ? next
          : begin.then(
              () => next,
              (error: unknown) => {
                next.catch(() => undefined);
                throw error;
              },
            );
      return typeof text === 'string' && COMMIT.test(text) ? answered.then(committed) : answered;
    }

    /**
     * Holds the connection's writes back until this tick ends, so that the statements given to it
     * in one tick (`BEGIN` and the claim; a transactional call's result and the `COMMIT`) go out in
     * one write: one system call here, one read for the server. Through `pg`'s socket
     * (`connection.stream`, which `pg` does not document); without one nothing is held back.
     */
    #corkForTick(): void {
      const stream = (this as { connection?: { stream?: Partial<Writable> } }).connection?.stream;
      if (this.#corked || typeof stream?.cork !== 'function' || typeof stream.uncork !== 'function') return;
      this.#corked = true;
      stream.cork();
      process.nextTick(() => {
        this.#corked = false;
        stream.uncork?.();
      });
    }
  };
}

/** A broken connection's `'error'`: `pg` refuses its next query, which reports it. */
function reportedByNextQuery(): void {}
