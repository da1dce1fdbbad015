import { randomBytes } from 'node:crypto';
import { describe } from 'vitest';
import type { PrismaClientLike, PrismaQueryable } from '../../src/prisma/client.js';
import { databases, type TestDatabase } from './databases.js';

/** A database server whose trigger can raise a write conflict: PostgreSQL or MariaDB. */
export type ConflictingDatabase = TestDatabase & { provider: 'postgresql' | 'mysql' };

/**
 * `describe` once per database server; unconfigured ones are reported as skipped. SQLite has no
 * concurrent writers to conflict with, and no way to raise such an error from a trigger.
 */
export function describeEachServer(title: string, suite: (db: ConflictingDatabase) => void): void {
  for (const db of databases) {
    if (db.provider === 'sqlite') continue;
    (db.url ? describe : describe.skip)(`${title} on ${db.name}`, () => suite(db as ConflictingDatabase));
  }
}

/** Write conflicts on demand, raised by a resolver's own statement. */
export interface WriteConflicts {
  /** A new marker whose first `refusals` probes fail as a write conflict; later ones succeed. */
  plan(refusals: number): Promise<string>;
  /**
   * The statement a resolver runs through its `tx`: inserts a `conflict_probe` row for `marker`,
   * which fails while the marker's plan lasts.
   */
  probe(tx: PrismaQueryable, marker: string): Promise<void>;
}

/**
 * Installs (once per database; concurrent test files may race) a `conflict_probe` table whose
 * trigger refuses the first N inserts of a marker as a concurrent transaction would: PostgreSQL
 * with a serialization failure (SQLSTATE 40001), MariaDB with a deadlock (error 1213, SQLSTATE
 * 40001). The count of refusals lives outside the failing transaction (a sequence per marker; a
 * MyISAM table), so the rollback that follows each refusal does not undo it.
 */
export async function writeConflicts(
  prisma: PrismaClientLike,
  provider: 'postgresql' | 'mysql',
): Promise<WriteConflicts> {
  if (provider === 'postgresql') {
    await prisma.$transaction(async (tx: PrismaQueryable) => {
      // CREATE … IF NOT EXISTS is not safe against a concurrent CREATE of the same name.
      await tx.$executeRawUnsafe(`SELECT pg_advisory_xact_lock(hashtext('conflict_probe'))`);
      for (const statement of POSTGRES_INSTALL) await tx.$executeRawUnsafe(statement);
    });
    return {
      async plan(refusals) {
        const marker = newMarker();
        await prisma.$executeRawUnsafe(`CREATE SEQUENCE conflict_probe_${marker}`);
        await prisma.$executeRawUnsafe(
          'INSERT INTO conflict_probe_plan (marker, refusals) VALUES ($1, $2)',
          marker,
          refusals,
        );
        return marker;
      },
      async probe(tx, marker) {
        await tx.$executeRawUnsafe('INSERT INTO conflict_probe (marker) VALUES ($1)', marker);
      },
    };
  }
  for (const statement of MARIADB_INSTALL) await prisma.$executeRawUnsafe(statement);
  return {
    async plan(refusals) {
      const marker = newMarker();
      await prisma.$executeRawUnsafe(
        'INSERT INTO conflict_probe_plan (marker, remaining) VALUES (?, ?)',
        marker,
        refusals,
      );
      return marker;
    },
    async probe(tx, marker) {
      await tx.$executeRawUnsafe('INSERT INTO conflict_probe (marker) VALUES (?)', marker);
    },
  };
}

/** Lower-case hex: a marker doubles as part of a sequence name. */
const newMarker = () => `m${randomBytes(8).toString('hex')}`;

const POSTGRES_INSTALL = [
  'CREATE TABLE IF NOT EXISTS conflict_probe (marker TEXT NOT NULL)',
  'CREATE TABLE IF NOT EXISTS conflict_probe_plan (marker TEXT PRIMARY KEY, refusals INTEGER NOT NULL)',
  `CREATE OR REPLACE FUNCTION conflict_probe_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
   DECLARE planned INTEGER;
   BEGIN
     SELECT refusals INTO planned FROM conflict_probe_plan WHERE marker = NEW.marker;
     -- nextval is not rolled back with the transaction it runs in.
     IF planned IS NOT NULL AND nextval('conflict_probe_' || NEW.marker) <= planned THEN
       RAISE EXCEPTION 'conflict_probe: injected serialization failure for %', NEW.marker
         USING ERRCODE = '40001';
     END IF;
     RETURN NEW;
   END $$`,
  `CREATE OR REPLACE TRIGGER conflict_probe_refuse BEFORE INSERT ON conflict_probe
   FOR EACH ROW EXECUTE FUNCTION conflict_probe_refuse()`,
];

const MARIADB_INSTALL = [
  'CREATE TABLE IF NOT EXISTS conflict_probe (marker VARCHAR(64) NOT NULL) ENGINE=InnoDB',
  // MyISAM: the decrement stays when the insert that made it fails and its transaction rolls back.
  'CREATE TABLE IF NOT EXISTS conflict_probe_plan (marker VARCHAR(64) PRIMARY KEY, remaining INT NOT NULL) ENGINE=MyISAM',
  `CREATE TRIGGER IF NOT EXISTS conflict_probe_refuse BEFORE INSERT ON conflict_probe FOR EACH ROW
   BEGIN
     DECLARE planned INT DEFAULT (SELECT remaining FROM conflict_probe_plan WHERE marker = NEW.marker);
     IF planned > 0 THEN
       UPDATE conflict_probe_plan SET remaining = remaining - 1 WHERE marker = NEW.marker;
       SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213,
         MESSAGE_TEXT = 'conflict_probe: injected deadlock';
     END IF;
   END`,
];
