import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/**
 * Keeps the README true: every TypeScript (and Prisma schema) block in it is preceded by `<!-- sample: <file> -->` and
 * must be, to the character, that file (or its `// #region readme` … `// #endregion readme` part).
 * The files themselves are type-checked and run by their own tests.
 */
const readme = readFileSync('README.md', 'utf8');
const blocks = [...readme.matchAll(/(?:<!-- sample: (\S+) -->\s*\n)?```(\w+)\n([\s\S]*?)```/g)].map(
  ([, file, language, code]) => ({ file, language: language!, code: code!.trimEnd() }),
);

function sampleOf(file: string): string {
  const text = readFileSync(file, 'utf8');
  const region = /\/\/ #region readme\n([\s\S]*?)\n\s*\/\/ #endregion readme/.exec(text);
  return (region ? region[1]! : text).trimEnd();
}

describe('README', () => {
  it('has no TypeScript block without a sample file behind it', () => {
    const checked = new Set(['ts', 'typescript', 'tsx', 'prisma']);
    expect(blocks.filter((b) => checked.has(b.language) && !b.file).map((b) => b.code.slice(0, 80))).toEqual(
      [],
    );
  });

  it.each(blocks.filter((b) => b.file).map((b) => [b.file!, b.code]))(
    'shows %s exactly as it runs',
    (file, code) => {
      expect(code).toBe(sampleOf(file));
    },
  );
});
