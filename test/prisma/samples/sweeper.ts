import { startSweeper, sweepExpired } from 'idempotent-mutations/prisma';
import type { PrismaClient } from '../../../generated/sqlite/client.js';

/** In the server: sweep every 10 minutes; the timer never keeps the process alive. */
export function startIdempotencySweeper(prisma: PrismaClient, intervalMs = 10 * 60_000) {
  const sweeper = startSweeper(prisma, {
    intervalMs,
    batchSize: 1_000, // one short DELETE per 1,000 records
    maxBatches: 100, // at most 100,000 records a sweep; the rest waits for the next one
    onError: (error) => console.error('idempotency sweep failed', error),
  });
  return () => sweeper.stop(); // on shutdown: waits for the batch in flight
}

/** Or once, from a job of your own. */
export async function sweepOnce(prisma: PrismaClient, signal?: AbortSignal): Promise<number> {
  return sweepExpired(prisma, { batchSize: 1_000, signal });
}
