#!/usr/bin/env bash
# Packs the library and installs the tarball into fresh projects, as a user would:
#   trpc-postgres  tRPC + Prisma on PostgreSQL: the README's "From an empty folder" steps
#   graphql-only   Yoga + idempotentFetch, with no @trpc/* package installed
#   commonjs       require() through Node's require(esm)
# Each is type-checked strictly (exactOptionalPropertyTypes, skipLibCheck: false) and runs a
# replayed call. Also publint --strict and @arethetypeswrong/cli on the tarball.
# Installs come from the npm cache first (--prefer-offline); nothing runs `prisma migrate`.
#
#   test/consumers/run.sh            (TEST_POSTGRES_URL: the server to create the consumer's database on)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# Outside the repository: Node and TypeScript look for packages in every parent folder's
# node_modules, and this repository's would hide a missing dependency (or a @trpc/* that must not be there).
work="$(mktemp -d "${TMPDIR:-/tmp}/idempotent-mutations-consumers.XXXXXX")"
trap 'rm -rf "$work"' EXIT
postgres="${TEST_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/test}"
# The consumer's own database, next to the tests' one: <name>_consumer, dropped and created afresh.
export DATABASE_URL="${postgres%%\?*}_consumer"
tsc() { node "$root/node_modules/typescript/bin/tsc" "$@"; }
install() { npm install --prefer-offline --no-audit --no-fund --loglevel=error "$@"; }
step() { printf '\n== %s (at %ss)\n' "$*" "$SECONDS"; }

cd "$root"
step "npm pack"
npm pack --pack-destination "$work" --loglevel=error >/dev/null
tarball="$(ls "$work"/idempotent-mutations-*.tgz)"
node test/consumers/check-tarball.mjs "$tarball"

step "publint --strict"
npx --no-install publint --strict "$tarball"
step "@arethetypeswrong/cli (node16, bundler)"
# ESM only: from CommonJS, node16 resolution reaches the ESM types, which TypeScript 5.8+ and Node
# 20.19+ (require(esm)) accept; the commonjs consumer below type-checks and runs exactly that.
npx --no-install attw "$tarball" --profile node16 --ignore-rules cjs-resolves-to-esm

for consumer in trpc-postgres graphql-only commonjs; do
  cp -r "test/consumers/$consumer" "$work/$consumer"
done
step "npm install (the three consumers at once)"
pids=()
for consumer in trpc-postgres graphql-only commonjs; do
  (cd "$work/$consumer" && install "$tarball" >"$work/$consumer.install.log" 2>&1) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || { cat "$work"/*.install.log; exit 1; }; done

step "trpc-postgres"
cd "$work/trpc-postgres"
cp node_modules/idempotent-mutations/prisma/postgresql/idempotency.prisma prisma/schema/
# Offline, `prisma generate` must not look for the schema engine it would download (it does not run it).
PRISMA_SCHEMA_ENGINE_BINARY="$(command -v node)" PRISMA_HIDE_UPDATE_MESSAGE=1 npx prisma generate --schema prisma/schema
node --input-type=module -e "
  import pg from 'pg';
  const url = new URL(process.env.DATABASE_URL);
  const name = url.pathname.slice(1);
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.href });
  await client.connect();
  await client.query('DROP DATABASE IF EXISTS \"' + name + '\"');
  await client.query('CREATE DATABASE \"' + name + '\"');
  await client.end();"
# Before the table exists, the CLI's hint names the migrations inside the installed package.
hint="$(npx idempotent-mutations stats --database-url "$DATABASE_URL" 2>&1 || true)"
case "$hint" in
  *"$PWD/node_modules/idempotent-mutations/prisma/postgresql/migrations/"*) echo "hint: ${hint##*idempotent-mutations: }" ;;
  *) echo "$hint" >&2; echo "the missing-table hint does not name the installed package's migrations" >&2; exit 1 ;;
esac
npx idempotent-mutations migrate --database-url "$DATABASE_URL" --migrations prisma/migrations
tsc -p .
npx tsx src/main.ts

step "graphql-only"
cd "$work/graphql-only"
if [ -e node_modules/@trpc ]; then echo "a @trpc package was installed" >&2; exit 1; fi
tsc -p .                       # the library's entries: strict, skipLibCheck: false
tsc -p tsconfig.yoga.json      # the Yoga server too (graphql-yoga's own typings need skipLibCheck)
npx tsx src/main.ts

step "commonjs"
cd "$work/commonjs"
tsc -p .
node smoke.cjs

step "done"
