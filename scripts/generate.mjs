// Generates the Prisma clients the tests, examples and benchmarks use (one per provider) with no
// network: `prisma generate` does not run the schema engine, but the CLI looks for its binary
// first, so point it at any existing file.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const prismaCli = require.resolve('prisma/build/index.js');
const env = {
  ...process.env,
  PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? process.execPath,
};
env.PRISMA_HIDE_UPDATE_MESSAGE = '1';

for (const provider of ['sqlite', 'postgresql', 'mysql']) {
  execFileSync(process.execPath, [prismaCli, 'generate', '--schema', `prisma/${provider}/schema.prisma`], {
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}
console.log('generated Prisma clients for sqlite, postgresql, mysql in generated/');
