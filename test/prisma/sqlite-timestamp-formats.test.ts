import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { recordStats, stuckRecords, sweepExpired } from '../../src/prisma/index.js';
import { connect, databases } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';
import {
  everyStateCounts,
  recordsInEveryState,
  storedKeys,
  stuckKeys,
  unsweptKeys,
} from '../helpers/record-states.js';
import {
  type SqliteTimestampFormat,
  sqliteTimestampFormats,
  storedExpiry,
  writeRecordsAs,
} from '../helpers/sqlite-timestamps.js';

const DAY = 86_400_000;
/** Whole seconds, which every format holds exactly. */
const wholeSecond = (ms: number) => Math.floor(ms / 1_000) * 1_000;

const stored: Record<SqliteTimestampFormat, { type: string; value: RegExp }> = {
  'YYYY-MM-DD HH:MM:SS': { type: 'text', value: /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/ },
  iso8601: { type: 'text', value: /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$/ },
  'unixepoch-ms': { type: 'integer', value: /^\d{13}$/ },
};

// On SQLite the process's clock and the database's are the same machine's; these tests move
// neither, and only change how the timestamps are stored.
describe('stats, stuck records and sweeps over every SQLite timestamp format', () => {
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
      expect((await stuckRecords(prisma)).map((r) => r.key)).toEqual(stuckKeys);
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
});
