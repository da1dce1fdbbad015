import { mkdir, rm, writeFile } from 'node:fs/promises';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterForUrl } from '../../src/prisma/adapter-for-url.js';
import type { Provider } from '../../src/prisma/client.js';
import {
  applyMigrations,
  type Migration,
  type MigrationTarget,
  mysqlStatements,
  readMigrations,
  shippedMigrationsFolder,
} from '../../src/prisma/migrations.js';
import { describeEachDatabase } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';

type Adapter = MigrationTarget & { dispose(): Promise<void> };

const sql = (text: string) => ({ sql: text, args: [], argTypes: [] });

/** A migrations folder of its own under .tmp/, with one `migration.sql` per name, read as the CLI reads it. */
async function migrationsFolder(label: string, scripts: Record<string, string>): Promise<Migration[]> {
  const folder = `.tmp/migrations-${label}/`;
  await rm(folder, { recursive: true, force: true });
  for (const [name, script] of Object.entries(scripts)) {
    await mkdir(`${folder}${name}`, { recursive: true });
    await writeFile(`${folder}${name}/migration.sql`, script);
  }
  return readMigrations(folder);
}

/** A migration with a `;` where a split at each one would cut a statement, and what it leaves. */
const QUOTED: Partial<Record<Provider, { where: string; script: string[]; select: string; row: unknown[] }>> =
  {
    mysql: {
      where: 'a string, a quoted name or a comment',
      script: [
        'CREATE TABLE `probe;quoted` (',
        '  `id` INTEGER NOT NULL, -- the invoice id;',
        "  `a;b` VARCHAR(20) NOT NULL DEFAULT 'x\\';y' # a note;",
        ');',
        'INSERT INTO `probe;quoted` (`id`) VALUES (1);',
      ],
      select: 'SELECT `id`, `a;b` FROM `probe;quoted`',
      row: [1, "x';y"],
    },
    postgresql: {
      where: 'a string, a quoted name, a comment or a dollar-quoted body',
      script: [
        'CREATE FUNCTION probe_answer() RETURNS TEXT LANGUAGE plpgsql AS $body$',
        'BEGIN',
        "  RETURN 'a;b'; -- the answer;",
        'END;',
        '$body$;',
        `CREATE TABLE "probe;quoted" ("a;b" TEXT NOT NULL DEFAULT E'x\\';y' /* a ; /* nested; */ */);`,
        `INSERT INTO "probe;quoted" DEFAULT VALUES;`,
      ],
      select: 'SELECT probe_answer(), "a;b" FROM "probe;quoted"',
      row: ['a;b', "x';y"],
    },
  };

const NAME = '20990101000000_probe';
const CREATE_PROBE = 'CREATE TABLE migration_probe (id INTEGER NOT NULL);\n';

describe('mysqlStatements', () => {
  it('splits at each ; outside strings, quoted names and comments, and drops pieces of comments only', () => {
    const script = [
      '-- a table; of invoices',
      'CREATE TABLE `t;1` (',
      '  `id` INTEGER NOT NULL, -- the invoice id;',
      "  `note` VARCHAR(20) NOT NULL DEFAULT 'a;b\\';c', # a note;",
      '  `tag` VARCHAR(20) NOT NULL DEFAULT "x"";" /* a ; here */',
      ');',
      'INSERT INTO `t;1` (`id`) VALUES (1--1);',
      '/* the end; */',
      '',
    ].join('\n');
    expect(mysqlStatements(script).map((statement) => statement.trim())).toEqual([
      script.slice(0, script.indexOf(');') + 1).trim(),
      'INSERT INTO `t;1` (`id`) VALUES (1--1)',
    ]);
  });

  it('keeps the conditional comments of a mysqldump, which the server runs', () => {
    const script = [
      '/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;',
      '/*M!100616 SET @OLD_NOTE_VERBOSITY=@@NOTE_VERBOSITY, NOTE_VERBOSITY=0 */;',
      '/* a plain comment */;',
      'SELECT 1;',
    ].join('\n');
    expect(mysqlStatements(script).map((statement) => statement.trim())).toEqual([
      '/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */',
      '/*M!100616 SET @OLD_NOTE_VERBOSITY=@@NOTE_VERBOSITY, NOTE_VERBOSITY=0 */',
      'SELECT 1',
    ]);
  });
});

describeEachDatabase('applying migrations', (shared) => {
  let isolated: IsolatedDatabase;
  let adapter: Adapter;
  const { provider } = shared;

  beforeAll(async () => {
    isolated = await isolatedDatabase(shared);
    adapter = (await (await adapterForUrl(isolated.db.url!)).connect()) as Adapter;
  });
  afterAll(async () => {
    await adapter?.dispose();
    await isolated?.drop();
  });

  const probeTables = async () =>
    Number((await adapter.queryRaw(sql(tableCount(provider, 'migration_probe')))).rows[0]?.[0]);
  const recorded = async () =>
    (
      await adapter.queryRaw(
        sql(`SELECT migration_name FROM _prisma_migrations WHERE migration_name = '${NAME}'`),
      )
    ).rows.map(([name]) => name);

  it('applies a migration once when two runs start at once (two servers starting)', async () => {
    await adapter.executeRaw(sql('CREATE TABLE race_counter (n INTEGER NOT NULL)'));
    await adapter.executeRaw(sql('INSERT INTO race_counter VALUES (0)'));
    const pause =
      { postgresql: 'SELECT pg_sleep(0.3);\n', mysql: 'DO SLEEP(0.3);\n' }[provider as string] ?? '';
    const bump = [{ name: '20990101000001_bump', sql: `${pause}UPDATE race_counter SET n = n + 1;\n` }];
    const other = (await (await adapterForUrl(isolated.db.url!)).connect()) as Adapter;
    try {
      const ran = await Promise.all([
        applyMigrations(adapter, provider, bump),
        applyMigrations(other, provider, bump),
      ]);
      expect(ran.flat()).toEqual(['20990101000001_bump']);
    } finally {
      await other.dispose();
    }
    expect((await adapter.queryRaw(sql('SELECT n FROM race_counter'))).rows.map(([n]) => Number(n))).toEqual([
      1,
    ]);
    const records = await adapter.queryRaw(
      sql("SELECT migration_name FROM _prisma_migrations WHERE migration_name = '20990101000001_bump'"),
    );
    expect(records.rows).toHaveLength(1);
  });

  it('applies a migration once when the first run hands its transaction back slowly', async () => {
    await adapter.executeRaw(sql('CREATE TABLE slow_counter (n INTEGER NOT NULL)'));
    await adapter.executeRaw(sql('INSERT INTO slow_counter VALUES (0)'));
    const pause =
      { postgresql: 'SELECT pg_sleep(0.3);\n', mysql: 'DO SLEEP(0.3);\n' }[provider as string] ?? '';
    const name = '20990101000002_slow_commit';
    const bump = [{ name, sql: `${pause}UPDATE slow_counter SET n = n + 1;\n` }];
    // The first run's transactions end 400 ms after it asks: another run waiting for the lock must
    // still find the migration recorded once it holds it.
    const slow = new Proxy(adapter, {
      get(target, member) {
        if (member !== 'startTransaction') return Reflect.get(target, member).bind(target);
        return async () => {
          const tx = await target.startTransaction();
          return new Proxy(tx, {
            get(t, m) {
              const value = Reflect.get(t, m);
              if (m !== 'commit') return typeof value === 'function' ? value.bind(t) : value;
              return async () => {
                await new Promise((resolve) => setTimeout(resolve, 400));
                return t.commit();
              };
            },
          });
        };
      },
    });
    const other = (await (await adapterForUrl(isolated.db.url!)).connect()) as Adapter;
    try {
      const first = applyMigrations(slow, provider, bump);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const ran = await Promise.all([first, applyMigrations(other, provider, bump)]);
      expect(ran.flat()).toEqual([name]);
    } finally {
      await other.dispose();
    }
    expect((await adapter.queryRaw(sql('SELECT n FROM slow_counter'))).rows.map(([n]) => Number(n))).toEqual([
      1,
    ]);
  });

  // What `prisma migrate dev` writes for SQLite when a column of a referenced table changes: the
  // pragmas are ignored inside a transaction, where the DROP TABLE deleted the referencing rows.
  if (provider === 'sqlite')
    it('applies a table redefinition with foreign keys off, as its script asks: no row cascades away', async () => {
      const init = `CREATE TABLE "FkUser" ("id" INTEGER NOT NULL PRIMARY KEY, "name" TEXT NOT NULL);
CREATE TABLE "FkPost" ("id" INTEGER NOT NULL PRIMARY KEY, "authorId" INTEGER NOT NULL,
  CONSTRAINT "FkPost_authorId_fkey" FOREIGN KEY ("authorId") REFERENCES "FkUser" ("id") ON DELETE CASCADE ON UPDATE CASCADE);
`;
      const redefine = (orphan: string) => `-- RedefineTables
PRAGMA defer_foreign_keys=ON;
PRAGMA foreign_keys=OFF;
CREATE TABLE "new_FkUser" ("id" INTEGER NOT NULL PRIMARY KEY, "name" TEXT NOT NULL, "email" TEXT);
INSERT INTO "new_FkUser" ("id", "name") SELECT "id", "name" FROM "FkUser"${orphan};
DROP TABLE "FkUser";
ALTER TABLE "new_FkUser" RENAME TO "FkUser";
PRAGMA foreign_keys=ON;
PRAGMA defer_foreign_keys=OFF;
`;
      await applyMigrations(adapter, provider, [{ name: '20990101000003_fk_init', sql: init }]);
      await adapter.executeScript(
        `INSERT INTO "FkUser" VALUES (1, 'ann'), (2, 'bob'); INSERT INTO "FkPost" VALUES (10, 1), (11, 1), (12, 2);`,
      );
      const posts = async () =>
        Number((await adapter.queryRaw(sql('SELECT COUNT(*) FROM "FkPost"'))).rows[0]![0]);
      // One that leaves a post without its author is refused whole.
      await expect(
        applyMigrations(adapter, provider, [
          { name: '20990101000004_fk_orphan', sql: redefine(' WHERE "id" = 1') },
        ]),
      ).rejects.toThrow(/foreign key refers to no row/);
      expect(await posts()).toBe(3);
      expect(
        await applyMigrations(adapter, provider, [{ name: '20990101000005_fk_email', sql: redefine('') }]),
      ).toEqual(['20990101000005_fk_email']);
      expect(await posts()).toBe(3);
      // Foreign keys are on again for the connection.
      expect(Number((await adapter.queryRaw(sql('PRAGMA foreign_keys'))).rows[0]![0])).toBe(1);
    });

  // SQLite's default (rollback) journal: a reader's shared lock holds a commit back past the
  // adapter's 50 ms busy timeout.
  if (provider === 'sqlite')
    it('waits for a reader to finish before its COMMIT, as for another run before its BEGIN', async () => {
      const reader = new Database(isolated.db.url!.replace(/^file:/, ''));
      try {
        reader.exec('BEGIN');
        reader.prepare('SELECT COUNT(*) FROM _prisma_migrations').get();
        setTimeout(() => reader.exec('COMMIT'), 300);
        const name = '20990101000006_busy_commit';
        await expect(
          applyMigrations(adapter, provider, [{ name, sql: 'CREATE TABLE busy_probe (id INTEGER);\n' }]),
        ).resolves.toEqual([name]);
      } finally {
        reader.close();
      }
    });

  // A run that hangs while it holds the lock (or a session that took it and was never closed).
  if (provider === 'postgresql' || provider === 'mysql')
    it('gives up, applying nothing, when another session holds the migration lock past the wait', async () => {
      const holder = (await (await adapterForUrl(isolated.db.url!)).connect()) as Adapter;
      const held = await holder.startTransaction();
      try {
        await held.queryRaw(
          sql(
            provider === 'postgresql'
              ? 'SELECT 1 FROM pg_advisory_lock(72707369)'
              : "SELECT GET_LOCK('prisma_migrate', 0)",
          ),
        );
        const name = '20990101000007_never';
        await expect(
          applyMigrations(adapter, provider, [{ name, sql: 'CREATE TABLE never_probe (id INTEGER);\n' }], {
            lockWaitSeconds: 1,
          }),
        ).rejects.toThrow('Another run held the migration lock for 1 s: nothing was applied');
        expect(Number((await adapter.queryRaw(sql(tableCount(provider, 'never_probe')))).rows[0]?.[0])).toBe(
          0,
        );
      } finally {
        await held.rollback();
        await holder.dispose();
      }
    });

  // PostgreSQL's catalog races on two CREATE TABLE IF NOT EXISTS at once (a unique violation).
  if (provider === 'postgresql')
    it('sets up a new schema once when two runs start at once', async () => {
      const schema = `fresh_${Date.now().toString(36)}`;
      const url = `${shared.url}${shared.url!.includes('?') ? '&' : '?'}schema=${schema}`;
      const runs = [
        (await (await adapterForUrl(url)).connect()) as Adapter,
        (await (await adapterForUrl(url)).connect()) as Adapter,
      ];
      try {
        const shipped = await readMigrations(shippedMigrationsFolder(provider));
        const ran = await Promise.all(runs.map((run) => applyMigrations(run, provider, shipped)));
        expect(ran.flat().sort()).toEqual(shipped.map(({ name }) => name));
      } finally {
        await runs[0]!.executeRaw(sql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
        await Promise.all(runs.map((run) => run.dispose()));
      }
    });

  // Registered only where it applies: no skipped case on the other databases.
  if (provider !== 'mysql')
    it('applies a migration with its record or not at all: one that fails halfway leaves neither, and the corrected one applies whole', async () => {
      const failing = await migrationsFolder(`${provider}-failing`, {
        [NAME]: `${CREATE_PROBE}-- the second statement fails\nINSERT INTO no_such_table VALUES (1);\n`,
      });
      await expect(applyMigrations(adapter, provider, failing)).rejects.toThrow();
      expect(await probeTables()).toBe(0);
      expect(await recorded()).toEqual([]);

      const corrected = await migrationsFolder(`${provider}-corrected`, {
        [NAME]: `${CREATE_PROBE}INSERT INTO migration_probe VALUES (1);\n`,
      });
      expect(await applyMigrations(adapter, provider, corrected)).toEqual([NAME]);
      expect(await probeTables()).toBe(1);
      expect(
        (await adapter.queryRaw(sql('SELECT id FROM migration_probe'))).rows.map(([id]) => Number(id)),
      ).toEqual([1]);
      expect(await recorded()).toEqual([NAME]);
      expect(await applyMigrations(adapter, provider, corrected)).toEqual([]);
    });

  if (provider === 'mysql')
    it('keeps what a migration created before the statement that failed, unrecorded, as MySQL commits each DDL statement', async () => {
      const failing = await migrationsFolder(`${provider}-failing`, {
        [NAME]: `${CREATE_PROBE}INSERT INTO no_such_table VALUES (1);\n`,
      });
      await expect(applyMigrations(adapter, provider, failing)).rejects.toThrow();
      expect(await probeTables()).toBe(1);
      expect(await recorded()).toEqual([]);
    });

  if (provider === 'postgresql')
    it('applies them, and records them, in the schema a URL names (?schema=), where the store looks', async () => {
      // The isolated database already has them on its search path: the schema must not count them.
      const shipped = await readMigrations(shippedMigrationsFolder(provider));
      await applyMigrations(adapter, provider, shipped);
      const url = new URL(isolated.db.url!);
      url.searchParams.set('schema', 'app schema');
      const inSchema = (await (await adapterForUrl(url.toString())).connect()) as Adapter;
      try {
        const names = shipped.map(({ name }) => name);
        expect(await applyMigrations(inSchema, provider, shipped)).toEqual(names);
        const { rows } = await adapter.queryRaw(
          sql(
            `SELECT table_name FROM information_schema.tables WHERE table_schema = 'app schema' ORDER BY table_name`,
          ),
        );
        expect(rows.flat()).toEqual(['_prisma_migrations', 'idempotency_records', 'idempotency_steps']);
        expect(await applyMigrations(inSchema, provider, shipped)).toEqual([]);
      } finally {
        await inSchema.dispose();
        await adapter.executeRaw(sql('DROP SCHEMA "app schema" CASCADE'));
      }
    });

  // Prisma writes an enum's change on PostgreSQL as a script with its own transaction.
  if (provider === 'postgresql')
    it('runs a script that commits on its own as prisma migrate deploy does: whole, in the URL’s schema, recorded once', async () => {
      const url = new URL(isolated.db.url!);
      url.searchParams.set('schema', 'own_commit');
      const inSchema = (await (await adapterForUrl(url.toString())).connect()) as Adapter;
      const name = '20990101000010_enum';
      const enumChange = [
        'BEGIN;',
        `CREATE TYPE "Mood" AS ENUM ('sad', 'ok');`,
        'CREATE TABLE mood_probe (mood "Mood" NOT NULL);',
        'COMMIT;',
        'CREATE TABLE after_commit_probe (id INTEGER);',
      ].join('\n');
      const tablesOf = async (table: string) =>
        (
          await adapter.queryRaw(
            sql(`SELECT table_schema FROM information_schema.tables WHERE table_name = '${table}'`),
          )
        ).rows.flat();
      const searchPath = async () => (await inSchema.queryRaw(sql('SHOW search_path'))).rows[0]?.[0];
      const before = await searchPath();
      try {
        const failing = `BEGIN;\nCREATE TABLE failed_probe (id INTEGER);\nINSERT INTO no_such_table VALUES (1);\nCOMMIT;\n`;
        await expect(
          applyMigrations(inSchema, provider, [{ name: '20990101000009_failing', sql: failing }]),
        ).rejects.toThrow();
        expect(await tablesOf('failed_probe')).toEqual([]);

        expect(await applyMigrations(inSchema, provider, [{ name, sql: enumChange }])).toEqual([name]);
        expect(await tablesOf('mood_probe')).toEqual(['own_commit']);
        expect(await tablesOf('after_commit_probe')).toEqual(['own_commit']);
        expect(await applyMigrations(inSchema, provider, [{ name, sql: enumChange }])).toEqual([]);
        expect(
          (
            await adapter.queryRaw(
              sql(`SELECT count(*) FROM own_commit._prisma_migrations WHERE migration_name = '${name}'`),
            )
          ).rows[0]?.[0],
        ).toBe('1');
        // The connection goes back to the pool as it came: its search path, no lock held.
        expect(await searchPath()).toBe(before);
        const [[free]] = (await adapter.queryRaw(sql('SELECT pg_try_advisory_lock(72707369)'))).rows as [
          [boolean],
        ];
        expect(free).toBe(true);
        await adapter.queryRaw(sql('SELECT pg_advisory_unlock(72707369)'));
      } finally {
        await inSchema.dispose();
        await adapter.executeRaw(sql('DROP SCHEMA IF EXISTS own_commit CASCADE'));
      }
    });

  if (provider === 'postgresql')
    it('migrates into a schema its role owns without the right to create schemas in the database', async () => {
      const role = `migrator_${process.pid}_${Date.now()}`;
      const owned = `owned_${process.pid}`;
      await adapter.executeRaw(sql(`CREATE ROLE ${role} LOGIN`));
      await adapter.executeRaw(sql(`CREATE SCHEMA ${owned} AUTHORIZATION ${role}`));
      const url = new URL(isolated.db.url!);
      url.username = role;
      url.password = '';
      url.searchParams.set('schema', owned);
      const asRole = (await (await adapterForUrl(url.toString())).connect()) as Adapter;
      try {
        const shipped = await readMigrations(shippedMigrationsFolder(provider));
        expect(await applyMigrations(asRole, provider, shipped)).toEqual(shipped.map(({ name }) => name));
        expect(await applyMigrations(asRole, provider, shipped)).toEqual([]);
      } finally {
        await asRole.dispose();
        await adapter.executeRaw(sql(`DROP SCHEMA ${owned} CASCADE`));
        await adapter.executeRaw(sql(`DROP ROLE ${role}`));
      }
    });

  // Registered only where it applies: no skipped case on SQLite, which has no privileges.
  if (provider !== 'sqlite')
    it('finds everything applied, as a role that may use the tables but create none', async () => {
      const shipped = await readMigrations(shippedMigrationsFolder(provider));
      const role = `user_${process.pid}_${Date.now()}`;
      // A DBA migrated (into a schema of its own on PostgreSQL); the app's role may use the tables.
      const dbaUrl = new URL(isolated.db.url!);
      const schema = `dba_${process.pid}`;
      if (provider !== 'mysql') dbaUrl.searchParams.set('schema', schema);
      const asDba = (await (await adapterForUrl(dbaUrl.toString())).connect()) as Adapter;
      try {
        await applyMigrations(asDba, provider, shipped);
      } finally {
        await asDba.dispose();
      }
      const [grants, revokes] =
        provider === 'mysql'
          ? [
              [
                `CREATE USER '${role}'@'%'`,
                `GRANT SELECT, INSERT, UPDATE, DELETE ON \`${dbaUrl.pathname.slice(1)}\`.* TO '${role}'@'%'`,
              ],
              [`DROP USER '${role}'@'%'`],
            ]
          : [
              [
                `CREATE ROLE ${role} LOGIN`,
                `GRANT USAGE ON SCHEMA ${schema} TO ${role}`,
                `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema} TO ${role}`,
              ],
              [`DROP SCHEMA ${schema} CASCADE`, `DROP OWNED BY ${role}`, `DROP ROLE ${role}`],
            ];
      for (const statement of grants) await adapter.executeRaw(sql(statement));
      const roleUrl = new URL(dbaUrl);
      roleUrl.username = role;
      roleUrl.password = '';
      const asRole = (await (await adapterForUrl(roleUrl.toString())).connect()) as Adapter;
      try {
        expect(await applyMigrations(asRole, provider, shipped)).toEqual([]);
      } finally {
        await asRole.dispose();
        for (const statement of revokes) await adapter.executeRaw(sql(statement));
      }
    });

  const quoted = QUOTED[provider];
  // Registered only where it applies: no skipped case on the other databases.
  if (quoted)
    it(`keeps a ; inside ${quoted.where} within its statement`, async () => {
      const migrations = await migrationsFolder(`${provider}-quoted`, {
        '20990102000000_quoted': quoted.script.join('\n'),
      });
      expect(await applyMigrations(adapter, provider, migrations)).toEqual(['20990102000000_quoted']);
      const { rows } = await adapter.queryRaw(sql(quoted.select));
      expect(rows).toEqual([quoted.row]);
    });
});

/** How many tables of that name the connection's schema (or database, or file) has. */
function tableCount(provider: Provider, name: string): string {
  return provider === 'sqlite'
    ? `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '${name}'`
    : `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ${provider === 'mysql' ? 'DATABASE()' : 'current_schema()'} AND table_name = '${name}'`;
}
