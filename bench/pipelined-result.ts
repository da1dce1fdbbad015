// What a fresh key would gain on PostgreSQL if its result `UPDATE` were sent with `COMMIT` in one
// round trip (not built: see the README's Benchmarks), measured on the floor in process, side by side:
// plain; the floor (plain + the claim and the result, each awaited); the floor with the result's
// `UPDATE` left unawaited inside the transaction, so that Prisma's `COMMIT` follows it on the
// pipelining connection and its rows are read after the commit. Each also "corked": every statement a
// connection is given in one tick of the event loop goes out in one socket write.
//
//   npm run bench:pipelined -- [postgresql url]
//   (default: a database of its own, idempotent_mutations_profile)
//
// The pipelined floor is a measurement only. It is safe on PostgreSQL alone, where a failed statement
// aborts the transaction and `COMMIT` then rolls back; and only with an `UPDATE` that fails when it
// finds no row, which this one does not check before the commit.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type { Writable } from 'node:stream';
import pg from 'pg';
import { queryableOf } from '../src/prisma/adapter-queryable.js';
import { openTransaction } from '../src/prisma/direct-statements.js';
import { recordStatements } from '../src/prisma/record-sql.js';
import { type Sql, textFor } from '../src/prisma/sql.js';
import { floorPayment, insertPayment, type PaymentInput, plainPayment } from './apps.js';
import { type BenchDatabase, openClient, prepareDatabase } from './databases.js';
import { burst, median, orderOf } from './stats.js';

const database: BenchDatabase = {
  name: 'PostgreSQL',
  url: process.argv[2] ?? 'postgresql://postgres@127.0.0.1:5432/idempotent_mutations_profile',
  aliases: [],
};
const ROUNDS = 20;
const WARMUP = 2;
const CONCURRENCY = 32;
const DAY_MS = 86_400_000;

/** While set, each `pg` connection holds back the writes of one tick and sends them in one. */
let corking = false;
const corked = new WeakSet<object>();
const { query } = pg.Client.prototype;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  const stream = (this as unknown as { connection?: { stream?: Writable } }).connection?.stream;
  if (corking && stream && !corked.has(stream)) {
    corked.add(stream);
    stream.cork();
    process.nextTick(() => {
      corked.delete(stream);
      stream.uncork();
    });
  }
  return (query as (...args: unknown[]) => unknown).apply(this, args);
} as typeof query;

await prepareDatabase(database);
const prisma = await openClient(database.url);
const user = `pipelined-${process.pid}`;
const input: PaymentInput = { amount: '9.99', currency: 'EUR' };
const statements = recordStatements('postgresql');

/** The floor, with the result's `UPDATE` sent but not awaited before the commit. */
async function pipelinedFloor(key: string) {
  let completed: Promise<unknown[]> = Promise.resolve([]);
  const payment = await openTransaction((opening) =>
    prisma.$transaction(async (tx) => {
      if (!opening.direct) throw new Error('The bench client does not hand over its transactions');
      const own = queryableOf(opening.direct);
      const rows = ({ text, values }: Sql) =>
        own.$queryRawUnsafe<unknown[]>(textFor('postgresql', text), ...values);
      const claim = { scope: user, key, operation: 'createPayment', fingerprint: 'f'.repeat(64) };
      const claimed = await rows(statements.claim({ ...claim, ttlMs: DAY_MS }));
      if (claimed.length !== 1) throw new Error(`The key ${key} was not fresh`);
      const payment = await insertPayment(tx, user, input);
      const result = JSON.stringify(payment);
      completed = Promise.resolve(
        rows(statements.complete({ scope: user, key, result, resultIsError: false, ttlMs: DAY_MS })),
      );
      completed.catch(() => undefined); // read after the commit
      return payment;
    }),
  );
  if ((await completed).length !== 1) throw new Error(`The result of ${key} was not stored`);
  return payment;
}

const scenarios: Record<string, () => Promise<unknown>> = {
  plain: () => plainPayment(prisma, user, input),
  floor: () => floorPayment(prisma, user, randomUUID(), input),
  pipelined: () => pipelinedFloor(randomUUID()),
};
const names = Object.keys(scenarios).flatMap((name) => [name, `${name}, corked`]);

const loadAtStart = os.loadavg()[0]!;
const started = performance.now();
try {
  for (const concurrency of [1, CONCURRENCY]) {
    const calls = concurrency === 1 ? 100 : 400;
    const perSecond: Record<string, number[]> = Object.fromEntries(names.map((name) => [name, []]));
    for (let round = 0; round < WARMUP + ROUNDS; round++) {
      for (const name of orderOf(names, round)) {
        corking = name.endsWith(', corked');
        const run = await burst(scenarios[name.replace(', corked', '')]!, { calls, concurrency });
        corking = false;
        if (round >= WARMUP) perSecond[name]!.push(run.perSecond);
      }
    }
    const rate = (name: string) => median(perSecond[name]!);
    console.log(`\nconcurrency ${concurrency}: calls/s, median of ${ROUNDS} interleaved bursts of ${calls}`);
    for (const name of names) {
      const versus = name.startsWith('plain')
        ? ''
        : `  ${(rate(name) / rate(name.replace(/^\w+/, 'plain'))).toFixed(3)}× plain${name.includes('corked') ? ', corked' : ''}`;
      const floor = name.startsWith('pipelined')
        ? `, ${(rate(name) / rate(name.replace('pipelined', 'floor'))).toFixed(3)}× the floor`
        : '';
      console.log(`  ${name.padEnd(18)} ${rate(name).toFixed(0).padStart(6)}/s${versus}${floor}`);
    }
  }
  console.log(
    `\nnpm run bench:pipelined, ${new Date().toISOString()}, node ${process.version}, load average ${loadAtStart.toFixed(1)} → ${os.loadavg()[0]!.toFixed(1)}, ${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
} finally {
  await prisma.payment.deleteMany({ where: { userId: user } });
  await prisma.$disconnect();
}
