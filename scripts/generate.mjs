// Generates the Prisma clients the tests, examples and benchmarks use (one per provider) with no
// network: `prisma generate` does not run the schema engine, but the CLI looks for its binary
// first, so point it at any existing file.
//
// Each client's schema is a multi-file schema, as a user's would be: the shipped model(s) in
// prisma/<provider>/*.prisma next to this repository's example tables, examples/prisma/<provider>/
// schema.prisma (generator, datasource, Payment, Order). Both are copied into
// generated/schema/<provider>/, a folder as deep as examples/prisma/<provider>/, so the generator's
// relative `output` means the same from either.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const prismaCli = require.resolve('prisma/build/index.js');
const env = {
  ...process.env,
  PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? process.execPath,
};
env.PRISMA_HIDE_UPDATE_MESSAGE = '1';

for (const provider of ['sqlite', 'postgresql', 'mysql']) {
  const folder = `generated/schema/${provider}`;
  rmSync(folder, { recursive: true, force: true });
  mkdirSync(folder, { recursive: true });
  copyFileSync(`examples/prisma/${provider}/schema.prisma`, `${folder}/schema.prisma`);
  for (const file of readdirSync(`prisma/${provider}`).filter((name) => name.endsWith('.prisma'))) {
    copyFileSync(`prisma/${provider}/${file}`, `${folder}/${file}`);
  }
  execFileSync(process.execPath, [prismaCli, 'generate', '--schema', folder], {
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}
console.log('generated Prisma clients for sqlite, postgresql, mysql in generated/');
