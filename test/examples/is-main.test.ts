import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { isMain } from '../../examples/shared/is-main.js';

const dir = mkdtempSync(join(tmpdir(), 'is main ')); // a space, as in "My Projects"
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('knows the started script through a path with a space and through a symlink', () => {
  const script = join(dir, 'main.ts');
  const link = join(dir, 'linked.ts');
  writeFileSync(script, '');
  symlinkSync(script, link);
  const started = process.argv[1] as string;
  try {
    for (const argv1 of [script, link]) {
      process.argv[1] = argv1;
      expect(isMain(pathToFileURL(script).href)).toBe(true);
      expect(isMain(pathToFileURL(join(dir, 'other.ts')).href)).toBe(false);
    }
  } finally {
    process.argv[1] = started;
  }
});
