import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { prismaStore, recordStats, stuckRecords, sweepExpired } from '../../src/prisma/index.js';
import { sweepStatement } from '../../src/prisma/maintenance-sql.js';
import { connect, databases } from '../helpers/databases.js';
import { inFarTimeZone } from '../helpers/far-time-zone.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';
import {
  everyStateCounts,
  recordsInEveryState,
  storedKeys,
  stuckKeys,
  unsweptKeys,
} from '../helpers/record-states.js';
import { insertRecords } from '../helpers/records.js';
import {
  type SqliteTimestampFormat,
  sqliteTimestampFormats,
  storedExpiry,
  writeRecordsAs,
} from '../helpers/sqlite-timestamps.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** Whole seconds, which every format holds exactly. */
const wholeSecond = (ms: number) => Math.floor(ms / 1_000) * 1_000;

const stored: Record<SqliteTimestampFormat, { type: string; value: RegExp }> = {
  'YYYY-MM-DD HH:MM:SS': { type: 'text', value: /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/ },
  iso8601: { type: 'text', value: /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$/ },
  'unixepoch-ms': { type: 'integer', value: /^\d{13}$/ },
};

// On SQLite the process's clock and the database's are the same machine's; these tests move
// neither, and only change how the timestamps are stored. The process runs fourteen hours east of
// UTC: Prisma's client reads `YYYY-MM-DD HH:MM:SS` text in the process's zone.
describe('stats, stuck records and sweeps over every SQLite timestamp format', () => {
  inFarTimeZone();
  let isolated: IsolatedDatabase;
  let prisma: Awaited<ReturnType<typeof connect>>;
  let url: string;

  beforeEach(async () => {
    isolated = await isolatedDatabase(databases[0]!);
    url = isolated.db.url!;
    prisma = await connect(isolated.db);
  });
  afterEach(async () => {
    await prisma?.$disconnect();
    await isolated?.drop();
  });

  it.each(sqliteTimestampFormats)(
    'decides expiry and leases the same for timestamps stored as %s',
    async (format) => {
      const now = Date.now();
      const rows = recordsInEveryState(now, wholeSecond(now) - 30 * DAY);
      await writeRecordsAs(url, format, rows);
      const { type, value } = await storedExpiry(url, 'live');
      expect(type).toBe(stored[format].type);
      expect(String(value)).toMatch(stored[format].value);

      expect(await recordStats(prisma)).toEqual({
        ...everyStateCounts,
        oldestCreatedAt: rows[0]!.createdAt,
        newestCreatedAt: rows.at(-1)!.createdAt,
      });
      const stuck = await stuckRecords(prisma);
      expect(stuck.map((r) => r.key)).toEqual(stuckKeys);
      const row = rows.find((r) => r.key === stuck[0]!.key)!;
      const found = await prismaStore(prisma).find(row.scope, row.key);
      for (const record of [stuck[0]!, found!]) {
        expect(record.createdAt).toEqual(row.createdAt);
        // Within the second that `YYYY-MM-DD HH:MM:SS` keeps.
        expect(Math.abs(record.expiresAt.getTime() - row.expiresAt.getTime())).toBeLessThan(1_000);
        expect(Math.abs(record.lockedUntil!.getTime() - row.lockedUntil!.getTime())).toBeLessThan(1_000);
      }
      expect(await sweepExpired(prisma)).toBe(2);
      expect(await storedKeys(prisma)).toEqual([...unsweptKeys].sort());
    },
  );

  it('decides the same, and orders by time, when one table holds all three formats', async () => {
    const now = Date.now();
    // The oldest records are text and the newest integers: SQLite sorts every integer below
    // every text, so the stored values' own order would say the opposite.
    const sets = sqliteTimestampFormats.map((format, i) => ({
      format,
      rows: recordsInEveryState(now, wholeSecond(now) - (30 - 10 * i) * DAY, `${i}-`),
    }));
    for (const { format, rows } of sets) await writeRecordsAs(url, format, rows);

    expect(await recordStats(prisma)).toEqual({
      total: 3 * everyStateCounts.total,
      completed: 3 * everyStateCounts.completed,
      inProgress: 3 * everyStateCounts.inProgress,
      expired: 3 * everyStateCounts.expired,
      stuck: 3 * everyStateCounts.stuck,
      oldestCreatedAt: sets[0]!.rows[0]!.createdAt,
      newestCreatedAt: sets[2]!.rows.at(-1)!.createdAt,
    });
    expect((await stuckRecords(prisma)).map((r) => r.key)).toEqual(
      sets.flatMap((_, i) => stuckKeys.map((key) => `${i}-${key}`)),
    );
    expect(await sweepExpired(prisma, { batchSize: 4 })).toBe(6);
    expect(await storedKeys(prisma)).toEqual(
      sets.flatMap((_, i) => unsweptKeys.map((key) => `${i}-${key}`)).sort(),
    );
  });

  it('sweeps text written in other forms, with a zone, by the instant it names', async () => {
    const now = Date.now();
    await insertRecords(prisma, 'sqlite', [
      { scope: 'u', key: 'z-expired', expiresAt: new Date(now - HOUR) },
      { scope: 'u', key: 'z-live', expiresAt: new Date(now + DAY) },
      { scope: 'u', key: 'west-expired', expiresAt: new Date(now - HOUR) },
      { scope: 'u', key: 'west-live', expiresAt: new Date(now + HOUR) },
      { scope: 'u', key: 'east-live', expiresAt: new Date(now + HOUR) },
    ]);
    // `toISOString()` text, and local times five hours west and east of UTC.
    const local = (ms: number, offsetHours: number) =>
      `${new Date(ms + offsetHours * HOUR).toISOString().slice(0, 23)}${offsetHours < 0 ? '-' : '+'}0${Math.abs(offsetHours)}:00`;
    for (const [key, text] of [
      ['z-expired', new Date(now - HOUR).toISOString()],
      ['z-live', new Date(now + DAY).toISOString()],
      ['west-expired', local(now - HOUR, -5)],
      ['west-live', local(now + HOUR, -5)],
      ['east-live', local(now + HOUR, 5)],
    ]) {
      await prisma.$executeRawUnsafe(
        'UPDATE idempotency_records SET expires_at = ? WHERE idempotency_key = ?',
        text,
        key,
      );
    }
    expect((await recordStats(prisma)).expired).toBe(2);
    expect(await sweepExpired(prisma)).toBe(2);
    expect(await storedKeys(prisma)).toEqual(['east-live', 'west-live', 'z-live']);
  });

  it('finds expired records through the expires_at index, not by reading the whole table', async () => {
    const plan = await prisma.$queryRawUnsafe<{ detail: string }[]>(
      `EXPLAIN QUERY PLAN ${sweepStatement('sqlite', 1_000)}`,
    );
    const details = plan.map((step) => step.detail);
    expect(details).toContainEqual(expect.stringMatching(/USING INDEX idempotency_records_expires_at_idx/));
    expect(details).not.toContainEqual(expect.stringMatching(/^SCAN idempotency_records/));
  });
});
