// What the packed tarball holds, checked the way a user would find it after `npm install`: the
// published package.json (no `source` condition, no scripts), LICENSE, no source maps, and of the
// migrations only the library's own tables (no example tables).
import { execFileSync } from 'node:child_process';

const tarball = process.argv[2];
const files = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).trim().split('\n');
const manifest = JSON.parse(
  execFileSync('tar', ['-xzOf', tarball, 'package/package.json'], { encoding: 'utf8' }),
);
const migrationSql = files
  .filter((file) => file.endsWith('migration.sql'))
  .map((file) => execFileSync('tar', ['-xzOf', tarball, file], { encoding: 'utf8' }))
  .join('\n');

const problems = [
  JSON.stringify(manifest.exports).includes('"source"') && 'an export has a `source` condition',
  manifest.scripts && `scripts are published: ${Object.keys(manifest.scripts).join(', ')}`,
  !files.includes('package/LICENSE') && 'no LICENSE',
  ...['repository', 'homepage', 'bugs'].map((field) => !manifest[field] && `no ${field}`),
  manifest.sideEffects !== false && 'sideEffects is not false',
  ...files.filter((file) => file.endsWith('.map')).map((file) => `a source map: ${file}`),
  ...files.filter((file) => file.startsWith('package/src/')).map((file) => `a source file: ${file}`),
  /CREATE TABLE\s+\S*(payments|orders)/i.test(migrationSql) && 'an example table in the migrations',
  ...['postgresql', 'mysql', 'sqlite'].flatMap((provider) =>
    [
      `package/prisma/${provider}/idempotency.prisma`,
      `package/prisma/${provider}/migrations/migration_lock.toml`,
    ]
      .filter((file) => !files.includes(file))
      .map((file) => `missing ${file}`),
  ),
].filter(Boolean);

if (problems.length) {
  console.error(`${tarball}:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(
  `${tarball}: ${files.length} files, a clean package.json, LICENSE, no source maps, no example tables`,
);
