import { MAX_TIMER_MS } from '../core/run-idempotent.js';
import { type PrismaQueryable, type Provider, providerOf } from './client.js';
import { isTimeout, standalone } from './database-errors.js';
import {
  batchLimit,
  sweepBatchDelete,
  sweepPick,
  sweepStatement,
  tablesExistQuery,
} from './maintenance-sql.js';
import { adapterSchemaOf, storeTables } from './records-table.js';
import { raw, type Sql } from './sql.js';
import { type PickedStep, stepSweepBatchDelete, stepSweepPick, stepSweepStatement } from './step-sql.js';

/** Options of `sweepExpired`. */
export interface SweepOptions {
  /**
   * Records deleted per statement. Each batch is its own short statement, so the sweep never holds
   * locks for long and never grows one huge transaction.
   * @default 1_000
   */
  batchSize?: number | undefined;
  /**
   * Stops after this many batches (`DELETE` statements), the records' and then the steps' together
   * (a records' batch that found nothing expired does not count); what is left waits for the next
   * sweep. @default Infinity
   */
  maxBatches?: number | undefined;
  /** Stops the sweep between two batches; the count deleted so far is returned. */
  signal?: AbortSignal | undefined;
  /** The database, when it cannot be read off the client. @default the client's generated provider */
  provider?: Provider | undefined;
  /**
   * The records table, `name` or `schema.name`, as for `prismaStore`.
   * @default 'idempotency_records', in the client's driver adapter's schema if it has one
   */
  table?: string | undefined;
  /** Called after each batch, the records' and the steps', with the running totals (e.g. for a progress line). */
  onBatch?: ((progress: SweepProgress) => void) | undefined;
}

/** Where a sweep has got to. */
export interface SweepProgress {
  /** The batches that found rows to delete, the records' and then the steps', as `maxBatches` counts them. */
  batches: number;
  /** The expired records deleted. */
  deleted: number;
  /** The expired steps deleted whose record is gone. */
  steps: number;
  /** Whether the last batch found a full batch to delete, so more expired rows may remain. */
  more: boolean;
}

/**
 * Deletes expired records in bounded batches and returns how many it deleted, then the durable
 * steps whose record is gone and that have expired too (`onBatch` counts them). It deletes nothing unless
 * both tables exist (the records table and `idempotency_steps`). A record still
 * `IN_PROGRESS` under a lease that has not run out is never deleted, even past its expiry.
 * Expiry and leases are judged by the database's clock, whatever this process's clock says.
 * Runs on any client with raw queries (`$executeRawUnsafe`); safe to run on several servers at
 * once.
 */
export async function sweepExpired(prisma: PrismaQueryable, options: SweepOptions = {}): Promise<number> {
  const { signal, onBatch } = options;
  const { batchSize, maxBatches } = batchOptions(options);
  const provider = options.provider ?? providerOf(prisma);
  const tables = storeTables(provider, options.table, adapterSchemaOf(prisma));
  const records = batches(prisma, provider, sweepStatement(provider, batchSize, tables.records), {
    pick: sweepPick(batchSize, tables.records),
    remove: (keys: { scope: string; idempotency_key: string }[]) => sweepBatchDelete(tables.records, keys),
  });
  const steps = batches(prisma, provider, stepSweepStatement(provider, batchSize, tables), {
    pick: stepSweepPick(batchSize, tables),
    remove: (rows: PickedStep[]) => stepSweepBatchDelete(rows, tables),
  });
  // Both tables before the first DELETE: a sweep failing on a missing steps table after deleting
  // records would leave no word of what it deleted.
  await standalone(prisma, provider, (client) =>
    client.$queryRawUnsafe(tablesExistQuery([tables.records, tables.steps])),
  );
  let deleted = 0;
  let stepsDeleted = 0;
  let sent = 0;
  /** Sends `batch` until it finds less than a full one, within the one budget of batches. */
  const sweep = async (batch: typeof records, counted: (count: number) => void) => {
    while (sent < maxBatches && !signal?.aborted) {
      const { count, found } = await batch();
      // A batch that found nothing to delete leaves the budget to the steps: with `maxBatches: 1`
      // they would never be swept otherwise.
      if (found > 0) sent++;
      counted(count);
      const more = found >= batchSize;
      onBatch?.({ batches: sent, deleted, steps: stepsDeleted, more });
      if (!more) return;
      await breathe();
    }
  };
  await sweep(records, (count) => {
    deleted += count;
  });
  // Then the expired steps whose record is gone.
  await sweep(steps, (count) => {
    stepsDeleted += count;
  });
  return deleted;
}

/**
 * Let the event loop breathe between batches: with SQLite every statement settles without any I/O
 * wait, and an in-process sweep would otherwise hold up requests (and signals).
 */
function breathe(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * One batch of `statement`: how many rows it deleted, and how many it found to delete. On
 * MySQL/MariaDB the statement does not wait on a row another transaction holds: when it meets one,
 * the batch is the rows `pick` finds around the held ones, deleted by key with no lock wait either,
 * and one by one if one of them was taken since the pick (it then stays, for a later sweep).
 */
function batches<Row>(
  prisma: PrismaQueryable,
  provider: Provider,
  statement: string,
  held: { pick: string; remove: (rows: Row[]) => Sql },
): () => Promise<{ count: number; found: number }> {
  const run = (query: Sql) =>
    standalone(prisma, provider, (client) => client.$executeRawUnsafe(query.text, ...query.values));
  /** How many of `rows` it deleted; null when one of them is held (it then deleted none). */
  const removed = (rows: Row[]) =>
    run(held.remove(rows)).catch((error: unknown) => (isTimeout(error) ? null : Promise.reject(error)));
  return async () => {
    try {
      const count = await run(raw(statement));
      return { count, found: count };
    } catch (error) {
      if (provider !== 'mysql' || !isTimeout(error)) throw error;
    }
    const rows = await standalone(prisma, provider, (client) => client.$queryRawUnsafe<Row[]>(held.pick));
    if (rows.length === 0) return { count: 0, found: 0 };
    let count = await removed(rows);
    if (count === null) {
      count = 0;
      for (const row of rows) count += (await removed([row])) ?? 0;
    }
    // A pick whose rows all stayed (held, or live again by the time they were deleted) ends the
    // sweep: picked again at once, they would be found again, and again.
    return { count, found: count === 0 ? 0 : rows.length };
  };
}

/** `batchSize` and `maxBatches`, their defaults applied, refused when no sweep could use them. */
function batchOptions({
  batchSize = 1_000,
  maxBatches = Number.POSITIVE_INFINITY,
}: Pick<SweepOptions, 'batchSize' | 'maxBatches'>): { batchSize: number; maxBatches: number } {
  if (!(maxBatches >= 1)) throw new RangeError('maxBatches must be at least 1');
  return { batchSize: batchLimit(batchSize), maxBatches };
}

/** Options of `startSweeper`. */
export interface SweeperOptions
  extends Pick<SweepOptions, 'batchSize' | 'maxBatches' | 'provider' | 'table'> {
  /** Time from the end of one sweep to the start of the next; the first runs after one interval. @default 60_000 */
  intervalMs?: number | undefined;
  /** Called with the count each sweep deleted; by one that failed, before `onError`, when it deleted some. */
  onSweep?: ((deleted: number) => void) | undefined;
  /** Called when a sweep fails (the sweeper carries on at the next interval). @default ignore */
  onError?: ((error: unknown) => void) | undefined;
}

/** A running sweeper. */
export interface Sweeper {
  /** Stops sweeping; resolves once a sweep in progress has finished its current batch. */
  stop(): Promise<void>;
}

/**
 * Runs `sweepExpired` every `intervalMs` in this process. The timer is unref'd, so the sweeper
 * never keeps a process alive; sweeps never overlap.
 */
export function startSweeper(prisma: PrismaQueryable, options: SweeperOptions = {}): Sweeper {
  const { intervalMs = 60_000, onSweep, onError, ...sweepOptions } = options;
  // Node's timers take at most 2^31 - 1 ms; beyond, they fire at once (a sweep after every sweep).
  if (!(intervalMs > 0 && intervalMs <= MAX_TIMER_MS)) {
    throw new RangeError(`intervalMs must be positive and at most ${MAX_TIMER_MS} (about 24.8 days)`);
  }
  // Refused now, not by every sweep after, whose failures only onError would see.
  batchOptions(sweepOptions);
  const stopping = new AbortController();
  let running: Promise<void> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;

  const schedule = () => {
    if (stopping.signal.aborted) return;
    timer = setTimeout(() => {
      let deleted = 0;
      const onBatch = (progress: SweepProgress) => {
        deleted = progress.deleted;
      };
      running = sweepExpired(prisma, { ...sweepOptions, signal: stopping.signal, onBatch })
        .then(
          (total) => onSweep?.(total),
          (error: unknown) => {
            // What a sweep deleted before it failed stays deleted: counted, then the failure.
            try {
              if (deleted > 0) onSweep?.(deleted);
            } finally {
              onError?.(error);
            }
          },
        )
        .catch(() => undefined) // a throwing callback must not stop the sweeper
        .finally(schedule);
    }, intervalMs);
    timer.unref();
  };
  schedule();

  return {
    async stop() {
      stopping.abort();
      clearTimeout(timer);
      await running;
    },
  };
}
