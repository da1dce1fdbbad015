import type { PrismaQueryable, Provider } from './client.js';

/** The table the records live in unless told otherwise. */
export const RECORDS_TABLE = 'idempotency_records';

/** The durable steps' table, beside the records table. */
export const STEPS_TABLE = 'idempotency_steps';

/**
 * The records table as SQL for `provider`: `table` (`name` or `schema.name`), in `schema` when it
 * names none. Given a schema or a name, both parts are quoted as written, as Prisma quotes them
 * (so `App` is not folded to `app` on PostgreSQL); with neither, the plain `idempotency_records`,
 * found through the connection's search path or database.
 */
export function recordsTable(provider: Provider, table?: string, schema?: string): string {
  if (table === undefined && schema === undefined) return RECORDS_TABLE;
  const parts = (table ?? RECORDS_TABLE).split('.');
  if (parts.length > 2 || parts.some((part) => part === '' || part.includes('\0'))) {
    throw new TypeError(`table must be "name" or "schema.name", not ${JSON.stringify(table)}`);
  }
  if (parts.length === 1 && schema !== undefined) parts.unshift(schema);
  return parts.map((part) => quotedName(provider, part)).join('.');
}

/** A name (of a table, a schema) quoted as written, as SQL takes it on `provider`. */
export function quotedName(provider: Provider, name: string): string {
  const quote = provider === 'mysql' ? '`' : '"';
  return `${quote}${name.replaceAll(quote, quote + quote)}${quote}`;
}

/**
 * The schema the client's driver adapter puts the models in (`new PrismaPg(…, { schema: 'app' })`):
 * Prisma qualifies its own queries with it, but raw queries, and so the store's, would go to the
 * connection's search path. Prisma exposes it publicly only on a connected adapter
 * (`getConnectionInfo().schemaName`), which the client keeps to itself: this reads the adapter
 * factory the client was given (as `providerOf` reads `_activeProvider`). `undefined` where it
 * cannot tell; then pass `table: 'schema.idempotency_records'`.
 */
/**
 * The tables of a store: the records table (see `recordsTable`) and, in the same schema, the
 * durable steps' `idempotency_steps`; both quoted, as SQL takes them.
 */
export function storeTables(
  provider: Provider,
  table?: string,
  schema?: string,
): { records: string; steps: string } {
  const parts = (table ?? RECORDS_TABLE).split('.');
  const stepsSchema = parts.length === 2 ? parts[0] : schema;
  return {
    records: recordsTable(provider, table, schema),
    steps: recordsTable(provider, stepsSchema === undefined ? STEPS_TABLE : `${stepsSchema}.${STEPS_TABLE}`),
  };
}

export function adapterSchemaOf(prisma: PrismaQueryable): string | undefined {
  const { _engineConfig } = prisma as { _engineConfig?: { adapter?: { options?: { schema?: unknown } } } };
  const schema = _engineConfig?.adapter?.options?.schema;
  return typeof schema === 'string' && schema !== '' ? schema : undefined;
}

/** The schema (MySQL: database) of a connected driver adapter, by its public `getConnectionInfo()`. */
export function connectedSchemaOf(
  adapter: { getConnectionInfo?(): { schemaName?: string } },
  provider: Provider,
): string | undefined {
  if (provider === 'sqlite') return undefined;
  const schema = adapter.getConnectionInfo?.().schemaName;
  return schema === '' ? undefined : schema;
}
