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

  /**
   * Names a pasted sample cannot run without: each block that uses one imports or declares it.
   * (`authenticate` is the app's own: a sample that calls it defines it.)
   */
  const needed = [
    'Decimal',
    'IdempotencyEvent',
    'PrismaClient',
    'Prisma',
    'createHTTPServer',
    'createYoga',
    'PrismaPg',
    'PrismaBetterSqlite3',
    'PrismaMariaDb',
    'superjson',
    'z',
    'initTRPC',
    'TRPCError',
    'idempotency',
    'useIdempotency',
    'prismaStore',
    'runIdempotent',
    'idempotentFetch',
    'idempotencyLink',
    'authenticate',
  ];
  it.each(blocks.filter((b) => b.file && b.language === 'ts').map((b) => [b.file!, b.code]))(
    'shows the imports %s needs',
    (_, code) => {
      const declared = new Set<string>();
      for (const [, names] of code.matchAll(/^import\s+(?:type\s+)?([\s\S]*?)\s+from\s+'[^']+';/gm)) {
        for (const name of names!.replace(/[{}]/g, ' ').split(/[\s,]+/)) {
          if (name && name !== 'type' && name !== 'as') declared.add(name);
        }
      }
      for (const [, name] of code.matchAll(/\b(?:function|const|let|class|interface|type)\s+(\w+)/g)) {
        declared.add(name!);
      }
      // Uses outside import lines, comments and strings.
      const body = code
        .replace(/^import[\s\S]*?;$/gm, '')
        .replace(/\/\/.*$/gm, '')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/`[^`]*`|'[^']*'/g, "''");
      const used = needed.filter((name) => new RegExp(`(?<![.\\w])${name}\\b`).test(body));
      expect(used.filter((name) => !declared.has(name))).toEqual([]);
    },
  );

  it("shows no import of this repository's sources: samples import the package by name", () => {
    expect(blocks.filter((b) => /from '(\.\.\/)+src\//.test(b.code)).map((b) => b.file)).toEqual([]);
  });

  it.each(blocks.filter((b) => b.file).map((b) => [b.file!, b.code]))(
    'shows %s exactly as it runs',
    (file, code) => {
      expect(code).toBe(sampleOf(file));
    },
  );
});
