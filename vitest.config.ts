import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // Resolve `idempotent-mutations/*` self-imports (examples, README samples) to the TypeScript sources.
    conditions: ['source'],
    // graphql 16 ships CommonJS (`main`) and ESM (`module`) with no `exports` map: Node loads the
    // CommonJS build for Yoga and Envelop, so our sources must get that same copy, not the ESM one
    // Vite would pick ("Cannot use GraphQLObjectType from another module or realm").
    alias: [{ find: /^graphql$/, replacement: 'graphql/index.js' }],
  },
  ssr: { resolve: { conditions: ['source'] } },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Store suites share one PostgreSQL and one MariaDB database; tests use their own scopes and keys.
    fileParallelism: true,
  },
});
