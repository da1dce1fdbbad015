import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { migrate } from '../../scripts/migrate.js';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import type { TestDatabase } from './databases.js';

interface RawAdapter {
  executeRaw(query: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<number>;
  dispose(): Promise<void>;
}

/** A migrated database of its own, and how to drop it. */
export interface IsolatedDatabase {
  db: TestDatabase;
  /** The PostgreSQL schema, MariaDB database or SQLite file name (without `.db`) it lives in. */
  name: string;
  drop(): Promise<void>;
}

/**
 * A fresh, migrated database next to `db` (a PostgreSQL schema, a MariaDB database, an SQLite
 * file), for tests that count every record in the table — the sweeper, `stats` — and so cannot
 * share it with suites running at the same time.
 */
export async function isolatedDatabase(db: TestDatabase): Promise<IsolatedDatabase> {
  if (!db.url) throw new Error(`${db.name} is not configured`);
  const name = `iso_${randomBytes(6).toString('hex')}`;
  if (db.provider === 'sqlite') {
    const file = `.tmp/${name}.db`;
    const isolated = { ...db, url: `file:${file}` };
    await migrate(isolated.url);
    return { db: isolated, name, drop: () => rm(file, { force: true }) };
  }
  const run = async (sql: string) => {
    const adapter = (await (await adapterForUrl(db.url!)).connect()) as RawAdapter;
    try {
      await adapter.executeRaw({ sql, args: [], argTypes: [] });
    } finally {
      await adapter.dispose();
    }
  };
  let url: string;
  if (db.provider === 'postgresql') {
    await run(`CREATE SCHEMA ${name}`);
    url = `${db.url}${db.url.includes('?') ? '&' : '?'}options=-c%20search_path%3D${name}`;
  } else {
    await run(`CREATE DATABASE ${name}`);
    const parsed = new URL(db.url);
    parsed.pathname = `/${name}`;
    url = parsed.toString();
  }
  await migrate(url);
  return {
    db: { ...db, url },
    name,
    drop: () => run(db.provider === 'postgresql' ? `DROP SCHEMA ${name} CASCADE` : `DROP DATABASE ${name}`),
  };
}
