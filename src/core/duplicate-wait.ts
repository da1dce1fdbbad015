import { type Call, pause } from './call.js';
import { decide } from './decide.js';
import type { StoredRecord } from './store.js';

/**
 * Waits for the call that holds the key under a lease elsewhere (another server, or this one in
 * lease mode): reads its record again until it is no longer running, or this call's wait
 * (`waitTimeoutMs`, from `since`) is over. Returns the last record read; it is still the running
 * one when the wait ran out. A record that is not a live `IN_PROGRESS` one of the same request is
 * returned at once.
 */
export async function waitWhileRunning<T, Tx>(
  call: Call<T, Tx>,
  record: StoredRecord | null,
  since: number,
): Promise<StoredRecord | null> {
  const { scope, key } = call.request;
  for (let current = record; ; current = await call.store.find(scope, key)) {
    if (current === null) return current;
    const decision = decide(current, call.request);
    if (decision.kind !== 'inProgress') return current;
    const delay = nextReadIn(call, call.clock() - since, decision.retryAfterMs);
    if (delay <= 0) return current;
    const paused = pause(delay);
    await (call.tracking ? call.tracking.waitFor(paused) : paused);
  }
}

/**
 * How long to wait before reading again: half as long as the wait so far (so the completion is
 * noticed at most about half the wait late, in a few reads), at least 5 ms and at most a second,
 * never past the lease's end (it may be taken over then) nor past the call's own deadline.
 */
function nextReadIn<T, Tx>(call: Call<T, Tx>, waitedMs: number, leaseLeftMs: number): number {
  const left = call.waitDeadline - call.clock();
  if (left <= 0) return 0;
  return Math.min(Math.max(5, waitedMs / 2), 1_000, Math.max(1, leaseLeftMs), left);
}
