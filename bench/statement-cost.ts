// What one statement costs through Prisma's client, against the same statement through the driver
// adapter beneath it: the profile behind the fresh-key overhead. On loopback most of a round trip
// is work in this process, so overlapping statements saves little; only sending fewer does.
//
//   npm run bench:statements -- [url]     (default: the PostgreSQL database of npm run bench)
import { parseArgs } from 'node:util';
import { runIdempotent } from 'idempotent-mutations';
import { adapterForUrl, prismaStore } from 'idempotent-mutations/prisma';
import { recordStatements } from '#internal/prisma/record-sql.js';
import { textFor } from '#internal/prisma/sql.js';
import { benchDatabases, openClient, prepareDatabase } from './databases.js';
import { median, orderOf } from './stats.js';

const { positionals } = parseArgs({ allowPositionals: true });
const database = benchDatabases({ postgres: positionals[0] }).find((db) => db.name === 'PostgreSQL')!;
await prepareDatabase(database);
const prisma = await openClient(database.url);
const adapter = (await (await adapterForUrl(database.url)).connect()) as {
  queryRaw(query: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<unknown>;
  dispose(): Promise<void>;
};
// A completed record, for the read a replay makes.
const store = prismaStore(prisma);
const scope = `statement-cost-${process.pid}`;
const replayRead = recordStatements('postgresql').find(scope, 'replayed');
const text = { scalarType: 'string', arity: 'scalar' };
await runIdempotent({ store, scope, key: 'replayed', operation: 'payments.create', input: {} }, () => ({
  id: 1,
  amount: '10.00',
}));
const select1 = async (client: { $queryRawUnsafe(sql: string): PromiseLike<unknown> }) =>
  client.$queryRawUnsafe('SELECT 1');

const cases: Record<string, () => Promise<unknown>> = {
  'SELECT 1 through the driver adapter': () => adapter.queryRaw({ sql: 'SELECT 1', args: [], argTypes: [] }),
  'SELECT 1 through Prisma ($queryRawUnsafe)': () => select1(prisma),
  'an empty interactive transaction (BEGIN, COMMIT)': () => prisma.$transaction(async () => 1),
  'the replay read: prismaStore(prisma).find()': () => store.find(scope, 'replayed'),
  'the same read through the driver adapter': () =>
    adapter.queryRaw({
      sql: textFor('postgresql', replayRead.text),
      args: [...replayRead.values],
      argTypes: [text, text],
    }),
  'a transaction with 3 × SELECT 1': () =>
    prisma.$transaction(async (tx) => {
      await select1(tx);
      await select1(tx);
      return select1(tx);
    }),
};

// Interleaved, like the main benchmark: one call of each case per round, after a warm-up.
const names = Object.keys(cases);
const samples: Record<string, number[]> = Object.fromEntries(names.map((name) => [name, []]));
for (let round = 0; round < 2_300; round++) {
  for (const name of orderOf(names, round)) {
    const started = performance.now();
    await cases[name]!();
    if (round >= 300) samples[name]!.push(performance.now() - started);
  }
}
const ms = Object.fromEntries(names.map((name) => [name, median(samples[name]!)]));
const [driver, client] = names.map((name) => ms[name]!) as [number, number];
const empty = ms['an empty interactive transaction (BEGIN, COMMIT)']!;
const three = ms['a transaction with 3 × SELECT 1']!;

console.log(`${database.url}, node ${process.version}, medians of 2,000 interleaved calls\n`);
for (const name of names) console.log(`${name.padEnd(50)} ${ms[name]!.toFixed(3).padStart(7)} ms`);
const perStatement = (three - empty) / 3;
console.log(
  `\none statement inside an interactive transaction: ${perStatement.toFixed(3)} ms = ` +
    `${(perStatement / driver).toFixed(1)}× SELECT 1 through the driver adapter, ${(perStatement / client).toFixed(1)}× through Prisma`,
);
await adapter.dispose();
await prisma.$disconnect();
