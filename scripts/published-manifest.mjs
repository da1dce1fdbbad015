// What `npm pack` and `npm publish` ship, set up around them (package.json's prepack and postpack):
//
//   node scripts/published-manifest.mjs pack      a fresh dist/, and package.json as published
//   node scripts/published-manifest.mjs restore   package.json as it was
//
// The published package.json has no `source` export condition (it points at src/, which is not
// shipped; this repository's tools resolve its own imports through it), no `imports` (`#internal/…`,
// which only this repository's benchmark and tests use), no scripts (`prepare`
// generates this repository's Prisma clients with a script that is not shipped) and no
// devDependencies. The original waits in .tmp/ until `restore`.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const manifest = 'package.json';
const saved = '.tmp/package.json.before-pack';

/** The manifest as published: the same fields, minus what only this repository uses. */
export function publishedManifest(pkg) {
  const { scripts: _scripts, devDependencies: _devDependencies, imports: _imports, ...published } = pkg;
  published.exports = Object.fromEntries(
    Object.entries(pkg.exports).map(([path, target]) => {
      if (typeof target !== 'object') return [path, target];
      const { source: _source, ...conditions } = target;
      return [path, conditions];
    }),
  );
  return published;
}

function pack() {
  if (existsSync(saved)) {
    throw new Error(
      `${saved} exists: an earlier pack did not finish. Run \`node scripts/published-manifest.mjs restore\` first.`,
    );
  }
  // A fresh build: files of deleted modules (or old source maps) must not linger in the tarball.
  rmSync('dist', { recursive: true, force: true });
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
  const text = readFileSync(manifest, 'utf8');
  mkdirSync('.tmp', { recursive: true });
  writeFileSync(saved, text);
  writeFileSync(manifest, `${JSON.stringify(publishedManifest(JSON.parse(text)), null, 2)}\n`);
}

function restore() {
  if (existsSync(saved)) renameSync(saved, manifest);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const command = process.argv[2];
  if (command === 'pack') pack();
  else if (command === 'restore') restore();
  else throw new Error('usage: node scripts/published-manifest.mjs pack|restore');
}
