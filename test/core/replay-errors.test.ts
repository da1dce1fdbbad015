import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type IdempotencyEvent,
  memoryStore,
  type ResolverClaim,
  runIdempotent,
  type Store,
} from '../../src/index.js';

/** Written for the gateway's errors (an axios-style check): it throws on any other error. */
const replayErrors = (error: unknown) => (error as { response: { status: number } }).response.status === 402;

function options(mode: 'transactional' | 'lease', store: Store<undefined> = memoryStore()) {
  const events: IdempotencyEvent[] = [];
  return {
    types: () => events.map((event) => event.type),
    call: {
      store,
      scope: 'user-1',
      key: 'k-1',
      operation: 'payments.charge',
      input: { amount: 10 },
      mode,
      replayErrors,
      onEvent: (event: IdempotencyEvent) => events.push(event),
    },
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('a replayErrors that throws accepts nothing', () => {
  it.each(['transactional', 'lease'] as const)(
    'in %s mode: the caller gets the resolver’s own error, no record stays, and a retry runs',
    async (mode) => {
      const { call } = options(mode);
      const failure = new Error('db constraint violated');
      const resolver = vi
        .fn<() => Promise<string>>()
        .mockRejectedValueOnce(failure)
        .mockResolvedValueOnce('ok');
      await expect(runIdempotent(call, resolver)).rejects.toBe(failure);
      expect(await call.store.find('user-1', 'k-1')).toBeNull();
      await expect(runIdempotent(call, resolver)).resolves.toMatchObject({ value: 'ok', replayed: false });
      expect(resolver).toHaveBeenCalledTimes(2);
    },
  );

  it('for a step: the step’s own error reaches the resolver, nothing is stored, and the retry runs the step', async () => {
    const { call } = options('lease');
    const failure = new Error('mail server down');
    const notify = vi
      .fn<() => string>()
      .mockImplementationOnce(() => {
        throw failure;
      })
      .mockReturnValue('sent');
    const resolver = async (_tx: unknown, { step }: ResolverClaim<undefined>) => step!('notify', notify);
    await expect(runIdempotent(call, resolver)).rejects.toBe(failure);
    expect(await call.store.steps!.list('user-1', 'k-1')).toEqual([]);
    await expect(runIdempotent(call, resolver)).resolves.toMatchObject({ value: 'sent', replayed: false });
    expect(notify).toHaveBeenCalledTimes(2);
  });

  it('in lease mode: the heartbeat stops and the claim is released when the call fails', async () => {
    vi.useFakeTimers({
      toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance'],
    });
    const base = memoryStore({ clock: () => performance.timeOrigin + performance.now() });
    let renewals = 0;
    const store: Store<undefined> = {
      ...base,
      lease: {
        ...base.lease,
        extend: (owner, leaseMs) => {
          renewals++;
          return base.lease.extend(owner, leaseMs);
        },
      },
    };
    const { call, types } = options('lease', store);
    const failing = runIdempotent({ ...call, leaseMs: 3_000, heartbeatMs: 1_000 }, async () => {
      await new Promise((resolve) => setTimeout(resolve, 1_500)); // one renewal while it runs
      throw new Error('db constraint violated');
    }).catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(1_500);
    const error = await failing;
    expect(renewals).toBe(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(renewals).toBe(1);
    expect(await store.find('user-1', 'k-1')).toBeNull();
    expect(types()).toEqual(['claimed', 'released']);
    expect(error).toMatchObject({ message: 'db constraint violated' });
  });
});
