import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import type { SqlDriverAdapterLike } from '../../src/prisma/adapter-queryable.js';

/** A connected driver adapter, as the store's `reads` takes it, and every query sent through it. */
export interface RecordedAdapter {
  reads: SqlDriverAdapterLike;
  queries: string[];
}

/** Writes down the text of every query sent through `adapter`. */
export function recordedAdapter(adapter: SqlDriverAdapterLike): RecordedAdapter {
  const queries: string[] = [];
  const reads: SqlDriverAdapterLike = {
    queryRaw(query) {
      queries.push(query.sql);
      return adapter.queryRaw(query);
    },
    executeRaw(query) {
      queries.push(query.sql);
      return adapter.executeRaw(query);
    },
    dispose: () => adapter.dispose(),
  };
  return { reads, queries };
}

/** `recordedAdapter` over a driver adapter of its own on `url` (`adapterForUrl`'s). */
export async function connectRecordedAdapter(url: string): Promise<RecordedAdapter> {
  return recordedAdapter((await (await adapterForUrl(url)).connect()) as SqlDriverAdapterLike);
}
