import { IdempotencyStoreUnavailableError } from '../core/errors.js';
import type { PrismaClientLike, PrismaQueryable, PrismaTransactionOptions, Provider } from './client.js';

/**
 * An error and what it wraps: Prisma puts a driver adapter's error under
 * `meta.driverAdapterError`, and the database's own under that one's `cause`.
 */
function* chainOf(error: unknown): Generator<Record<string, unknown>> {
  for (let current = error, depth = 0; current && typeof current === 'object' && depth < 6; depth++) {
    const node = current as Record<string, unknown>;
    yield node;
    current = (node.meta as { driverAdapterError?: unknown } | undefined)?.driverAdapterError ?? node.cause;
  }
}

/** An error of Prisma's client or of a driver adapter beneath it. */
export function isPrismaError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const { clientVersion } = error as { clientVersion?: unknown };
  return typeof clientVersion === 'string' || error.name === 'DriverAdapterError';
}

/** A write conflict, deadlock or serialization failure: worth running the transaction again. */
export function isWriteConflict(error: unknown): boolean {
  for (const { code, kind, originalCode } of chainOf(error)) {
    if (code === 'P2034' || kind === 'TransactionWriteConflict') return true;
    // PostgreSQL serialization failure / deadlock; MySQL deadlock.
    if (originalCode === '40001' || originalCode === '40P01' || code === 1213 || originalCode === '1213')
      return true;
  }
  return false;
}

/** Codes for a database that cannot be reached, or a pool that cannot hand out a connection. */
const CONNECTION_CODES = new Set<unknown>([
  'P1001',
  'P1002',
  'P1008',
  'P1011',
  'P1017',
  'P2024',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  45028, // mariadb: pool timeout, no connection could be made
  '45028',
]);
const CONNECTION_KINDS = new Set<unknown>([
  'DatabaseNotReachable',
  'ConnectionClosed',
  'SocketTimeout',
  'TooManyConnections',
]);

/** The database cannot be reached, or no connection could be had in time. */
export function isConnectionError(error: unknown): boolean {
  for (const node of chainOf(error)) {
    const { code, kind, originalCode, name, message } = node;
    if (CONNECTION_CODES.has(code) || CONNECTION_CODES.has(originalCode) || CONNECTION_KINDS.has(kind))
      return true;
    if (name === 'PrismaClientInitializationError') return true;
    // pg: the server closed the connection or did not answer, or the pool had no connection to
    // hand out, within `connectionTimeoutMillis`.
    if (
      typeof message === 'string' &&
      /^(Connection terminated\b|timeout exceeded when trying to connect)/.test(message)
    )
      return true;
    // The pool (or SQLite's single writer) could not hand out a connection within `maxWait`.
    if (code === 'P2028' && /Unable to start a transaction/i.test(String(message))) return true;
  }
  return false;
}

/** The error to throw for `error`: `IDEMPOTENCY_STORE_UNAVAILABLE` if the database cannot be reached. */
export function asUnavailable(error: unknown): unknown {
  if (!isConnectionError(error)) return error;
  return new IdempotencyStoreUnavailableError(
    `The idempotency store is unavailable: ${lastLine((error as Error).message) || 'unreachable'}`,
    { cause: error },
  );
}

/** Runs `run`, turning a database that cannot be reached into `IDEMPOTENCY_STORE_UNAVAILABLE`. */
export async function unavailableOnConnectionError<T>(run: () => PromiseLike<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    throw asUnavailable(error);
  }
}

function lastLine(text: string | undefined): string | undefined {
  return text?.trim().split('\n').pop()?.trim();
}

/**
 * Runs one statement so that it stands on its own. Through Prisma's SQLite adapter (one
 * connection) a statement outside a transaction runs inside whichever one another request has
 * open, sees its uncommitted rows and rolls back with it: on SQLite, with a client that has
 * `$transaction`, the statement gets a short transaction of its own (which waits for the open one).
 * Connection failures become `IDEMPOTENCY_STORE_UNAVAILABLE`.
 */
export function standalone<T>(
  client: PrismaQueryable,
  provider: Provider,
  statement: (client: PrismaQueryable) => PromiseLike<T>,
  options?: PrismaTransactionOptions,
): Promise<T> {
  const { $transaction } = client as Partial<PrismaClientLike>;
  return unavailableOnConnectionError(() =>
    provider === 'sqlite' && typeof $transaction === 'function'
      ? (client as PrismaClientLike).$transaction((tx: PrismaQueryable) => statement(tx), options)
      : statement(client),
  );
}
