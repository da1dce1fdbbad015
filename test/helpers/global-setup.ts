import { mkdir, rm } from 'node:fs/promises';
import { migrate } from '../../scripts/migrate.js';
import { databases } from './databases.js';

/**
 * Migrates the configured PostgreSQL and MariaDB databases once, before any suite runs, and says
 * plainly which database suites are skipped. A configured database that cannot be reached fails
 * the run: CI sets both URLs, so their suites are mandatory there.
 */
export default async function setup(): Promise<() => void> {
  // SQLite suites make a file each under .tmp/; start from an empty folder.
  await rm('.tmp', { recursive: true, force: true });
  await mkdir('.tmp');
  const skipped = databases.filter((db) => !db.url);
  for (const db of databases) {
    if (db.url && db.provider !== 'sqlite') await migrate(db.url);
  }
  const report = () => {
    if (skipped.length === 0) {
      console.log('\nDatabase suites: SQLite, PostgreSQL and MariaDB all ran.\n');
    } else {
      console.log(
        `\nDatabase suites SKIPPED: ${skipped.map((db) => `${db.name} (set ${db.env})`).join(', ')}. SQLite ran.\n`,
      );
    }
  };
  report();
  return report;
}
