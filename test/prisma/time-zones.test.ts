import { afterAll, beforeAll } from 'vitest';
import { type PrismaStore, prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, type TestDatabase } from '../helpers/databases.js';
import { inFarTimeZone } from '../helpers/far-time-zone.js';
import { recordTravel } from '../helpers/record-travel.js';
import { runStoreConformance } from '../helpers/store-conformance.js';

/**
 * `url` with a session time zone far from UTC and from the process's: ten hours west of UTC.
 * MariaDB's is set by the connector's first statement (`initSql`; a URL decodes `+` as a space).
 */
function inSessionZone(db: TestDatabase): { url: string; zone: string } {
  const url = db.url!;
  const join = url.includes('?') ? '&' : '?';
  if (db.provider === 'postgresql') {
    return {
      url: `${url}${join}options=${encodeURIComponent('-c TimeZone=Pacific/Honolulu')}`,
      zone: 'Pacific/Honolulu',
    };
  }
  if (db.provider === 'mysql') {
    return { url: `${url}${join}initSql=${encodeURIComponent("SET/**/time_zone='-10:00'")}`, zone: '-10:00' };
  }
  return { url, zone: 'none: SQLite has no session zone' };
}

// Time is the database's: the store decides expiry and leases in SQL against its UTC clock. The
// whole store contract again, with the process fourteen hours east of UTC and each database
// session ten hours west of it.
describeEachDatabase('prismaStore across time zones', (db) => {
  inFarTimeZone();
  const { url, zone } = inSessionZone(db);
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect({ ...db, url });
  });
  afterAll(async () => {
    await prisma?.$disconnect();
  });

  runStoreConformance(`${db.name}, the process in UTC+14, the session's zone ${zone}`, () => ({
    store: () => prismaStore(prisma) as PrismaStore<unknown>,
    travel: recordTravel(prisma, db.provider),
  }));
});
