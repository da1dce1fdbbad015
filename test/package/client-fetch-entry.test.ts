import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Every module specifier `file` imports at run time, and those of the modules it reaches in this
 * repository. Type-only imports are left out: they vanish from the emitted JavaScript.
 */
function runtimeImports(file: string, seen = new Set<string>()): Set<string> {
  const found = new Set<string>();
  if (seen.has(file)) return found;
  seen.add(file);
  const source = readFileSync(file, 'utf8');
  for (const [, clause, specifier] of source.matchAll(
    /^(?:import|export)\s+(type\s+)?[^'"]*?from\s+'([^']+)'/gm,
  )) {
    if (clause || !specifier) continue;
    if (specifier.startsWith('.')) {
      for (const nested of runtimeImports(resolve(dirname(file), specifier.replace(/\.js$/, '.ts')), seen)) {
        found.add(nested);
      }
    } else {
      found.add(specifier);
    }
  }
  return found;
}

describe('the idempotent-mutations/client/fetch entry', () => {
  it('loads no tRPC or GraphQL package, so a GraphQL-only app needs neither installed', () => {
    const packages = [...runtimeImports(resolve('src/client/fetch.ts'))];
    expect(packages.filter((name) => /^(@trpc\/|graphql)/.test(name))).toEqual([]);
    expect(packages).toEqual(['structured-headers']);
  });

  it('finds the tRPC imports of idempotent-mutations/client (the scan sees them when they are there)', () => {
    expect([...runtimeImports(resolve('src/client/index.ts'))]).toEqual(
      expect.arrayContaining(['@trpc/client', '@trpc/server/observable']),
    );
  });
});
