import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, databases } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';
import {
  type SqliteTimestampFormat,
  sqliteTimestampFormats,
  writeRecordsAs,
} from '../helpers/sqlite-timestamps.js';

const HOUR = 3_600_000;
const sqlite = databases.find((db) => db.provider === 'sqlite')!;

/**
 * The store's own reads and claims (not only the sweeper) decide liveness the same way whatever
 * format an SQLite file holds its timestamps in: a record written by an app whose adapter uses
 * `timestampFormat: 'unixepoch-ms'` is neither replayed after it expired nor taken over before.
 */
describe.each(sqliteTimestampFormats)(
  'the store on SQLite timestamps stored as %s',
  (format: SqliteTimestampFormat) => {
    let isolated: IsolatedDatabase;
    let prisma: Awaited<ReturnType<typeof connect>>;
    beforeEach(async () => {
      isolated = await isolatedDatabase(sqlite);
      const now = Date.now();
      await writeRecordsAs(isolated.db.url!, format, [
        { scope: 's', key: 'live', expiresAt: new Date(now + 24 * HOUR) },
        { scope: 's', key: 'expired', expiresAt: new Date(now - HOUR) },
        {
          scope: 's',
          key: 'leased',
          status: 'IN_PROGRESS',
          ownerToken: 'a'.repeat(64),
          lockedUntil: new Date(now + HOUR),
          expiresAt: new Date(now + 24 * HOUR),
        },
        {
          scope: 's',
          key: 'lease-ran-out',
          status: 'IN_PROGRESS',
          ownerToken: 'a'.repeat(64),
          lockedUntil: new Date(now - HOUR),
          expiresAt: new Date(now + 24 * HOUR),
        },
      ]);
      prisma = await connect(isolated.db);
    });
    afterEach(async () => {
      await prisma?.$disconnect();
      await isolated?.drop();
    });

    it('reads each record’s liveness by the database’s clock', async () => {
      const store = prismaStore(prisma);
      const liveFor = async (key: string) => (await store.find('s', key))!.liveForMs;
      expect(await liveFor('live')).toBeGreaterThan(23 * HOUR);
      expect(await liveFor('expired')).toBeLessThanOrEqual(0);
      expect(await liveFor('leased')).toBeGreaterThan(0.9 * HOUR);
      expect(await liveFor('lease-ran-out')).toBeLessThanOrEqual(0);
    });

    it('takes over only the records that are no longer live', async () => {
      const { lease } = prismaStore(prisma);
      const claim = (key: string) =>
        lease.claim({
          scope: 's',
          key,
          operation: 'test.op',
          fingerprint: '0'.repeat(64),
          ttlMs: HOUR,
          ownerToken: 'b'.repeat(64),
          leaseMs: 60_000,
        });
      expect(await claim('live')).toMatchObject({ claimed: false });
      expect(await claim('leased')).toMatchObject({ claimed: false });
      expect(await claim('expired')).toMatchObject({ claimed: true, tookOver: true });
      expect(await claim('lease-ran-out')).toMatchObject({ claimed: true, tookOver: true });
    });
  },
);
