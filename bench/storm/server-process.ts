// One app server of the exactly-once storm: its own Prisma client on one database node, serving
// the mutations its parent sends over IPC as an HTTP server would (through `runIdempotent`), and
// answering what a client would see: the value, or the error's code and retry hint.
//
//   node --import tsx --conditions=source server-process.ts <mysql url> <transactional|lease> [waitTimeoutMs] (forked)
import { Decimal } from '@prisma/client/runtime/client';
import { isIdempotencyError, runIdempotent } from 'idempotent-mutations';
import { adapterForUrl, prismaStore } from 'idempotent-mutations/prisma';
import { PrismaClient } from '../../generated/mysql/client.js';
import { countingConflicts } from './conflict-counter.js';
import type { StormAnswer, StormRequest, StormServerCalls } from './protocol.js';

const [url, modeArgument, waitArgument] = process.argv.slice(2);
const mode = modeArgument === 'lease' ? 'lease' : 'transactional';
const waitTimeoutMs = waitArgument === undefined ? undefined : Number(waitArgument);
if (!url || mode !== modeArgument || Number.isNaN(waitTimeoutMs) || !process.send)
  throw new Error('usage: server-process.ts <url> <transactional|lease> [waitTimeoutMs] (forked)');
const send = process.send.bind(process);

const { client: prisma, counts } = countingConflicts(
  new PrismaClient({ adapter: (await adapterForUrl(url)) as never }),
);
// Galera's certification failures come back as write conflicts: allow a few more rounds than the
// default, as a multi-primary deployment would.
const store = prismaStore(prisma, { maxRetries: 8 });

/** The requests not answered yet, by id: what `'calls'` reports. */
const inFlight = new Map<number, { key: string; phase: string; since: number }>();

async function serve({ id, scope, key }: StormRequest): Promise<StormAnswer> {
  const call = { key, phase: 'started', since: performance.now() };
  inFlight.set(id, call);
  const phase = (name: string) => {
    call.phase = name;
    call.since = performance.now();
  };
  try {
    const { value, replayed } = await runIdempotent(
      {
        store,
        scope,
        key,
        operation: 'payments.create',
        input: { amount: '5.00' },
        mode,
        leaseMs: 10_000,
        waitTimeoutMs,
        observe: () => ({
          phaseStart: (name) => phase(name),
          phaseEnd: (name, _at, error) => phase(`${name} ${error ? 'failed' : 'done'}`),
          end: () => undefined,
        }),
      },
      async (tx) => {
        const row = await tx.payment.create({
          data: { userId: `${scope}:${key}`, amount: new Decimal('5.00'), currency: 'EUR' },
        });
        return { paymentId: row.id };
      },
    );
    return { id, ok: true, paymentId: value.paymentId, replayed };
  } catch (error) {
    if (isIdempotencyError(error)) {
      const { retryAfterMs } = error as { retryAfterMs?: number };
      return { id, ok: false, code: error.code, retryAfterMs, message: error.message };
    }
    return { id, ok: false, message: error instanceof Error ? error.message : String(error) };
  } finally {
    inFlight.delete(id);
  }
}

process.on('message', (request: StormRequest | 'stop' | 'calls') => {
  if (request === 'calls') {
    const now = performance.now();
    const calls = [...inFlight].map(([id, { key, phase, since }]) => ({
      id,
      key,
      phase,
      forMs: now - since,
    }));
    send({ calls } satisfies StormServerCalls);
    return;
  }
  if (request === 'stop') {
    // Exit only once the summary has left: process.exit would drop a message still queued.
    send(
      { conflicts: counts },
      undefined,
      {},
      () => void prisma.$disconnect().finally(() => process.exit(0)),
    );
    return;
  }
  void serve(request).then(send);
});
// Warm up: Prisma compiles each query shape once; the storm measures the database, not that.
await prisma.$queryRawUnsafe('SELECT 1');
send({ ready: true });
