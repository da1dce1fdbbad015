import { adapterForUrl } from '#internal/prisma/adapter-for-url.js';
import type { SqlDriverAdapterLike } from '#internal/prisma/adapter-queryable.js';

/** A connected driver adapter, as the store's `reads` takes it, and every query sent through it. */
export interface RecordedAdapter {
  reads: SqlDriverAdapterLike;
  queries: string[];
}

/** `adapter`, telling `onQuery` the text of every query sent through it. */
export function watchedAdapter(
  adapter: SqlDriverAdapterLike,
  onQuery: (sql: string) => void,
): SqlDriverAdapterLike {
  return {
    queryRaw(query) {
      onQuery(query.sql);
      return adapter.queryRaw(query);
    },
    executeRaw(query) {
      onQuery(query.sql);
      return adapter.executeRaw(query);
    },
    dispose: () => adapter.dispose(),
  };
}

/** Writes down the text of every query sent through `adapter`. */
export function recordedAdapter(adapter: SqlDriverAdapterLike): RecordedAdapter {
  const queries: string[] = [];
  return { reads: watchedAdapter(adapter, (sql) => queries.push(sql)), queries };
}

/** `recordedAdapter` over a driver adapter of its own on `url` (`adapterForUrl`'s). */
export async function connectRecordedAdapter(url: string): Promise<RecordedAdapter> {
  return recordedAdapter((await (await adapterForUrl(url)).connect()) as SqlDriverAdapterLike);
}
