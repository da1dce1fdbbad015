import { describe, expect, it, vi } from 'vitest';
import {
  type IdempotencyEvent,
  IdempotencyInputError,
  IdempotencyKeyInProgressError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMismatchError,
  IdempotencyResultTooLargeError,
  IdempotencyStoreUnavailableError,
  memoryStore,
  runIdempotent,
  type Store,
  type TransactionSession,
} from '../../src/index.js';
import { gate } from '../helpers/gate.js';
import { storedRecord } from '../helpers/stored-record.js';

/**
 * A memory store whose transactions claim with what `claimOf` gives for the transaction's number
 * (from 1), or with its own claim when it gives nothing.
 */
function claimingStore(claimOf: (nth: number) => (() => Promise<never>) | undefined) {
  let transactions = 0;
  const store = withSessions(memoryStore(), () => {
    const claim = claimOf(++transactions);
    return claim ? { claim } : {};
  });
  return { store, transactions: () => transactions };
}

/** `store` whose every transaction's session is changed by `change` (called once a transaction). */
function withSessions(
  store: Store,
  change: (session: TransactionSession<unknown>) => Partial<TransactionSession<unknown>>,
): Store {
  return Object.assign(Object.create(store) as Store, {
    transaction: (work: Parameters<NonNullable<Store['transaction']>>[0]) =>
      store.transaction!((session) => work({ ...session, ...change(session) })),
  });
}

/**
 * The memory store as a store without savepoints (`TransactionSession.savepoint`) is: a replayable
 * error is kept by a transaction of its own, after the call's rolled back.
 */
const withoutSavepoints = (store: Store) => withSessions(store, () => ({ savepoint: undefined }));

const base = () => ({
  store: memoryStore(),
  scope: 'user-1',
  key: 'k-1',
  operation: 'payments.create',
  input: { amount: 10 },
});

describe('runIdempotent (memory store)', () => {
  it('runs an unseen key once and replays the stored result without running the resolver', async () => {
    const options = base();
    const resolver = vi.fn(async () => ({ id: 1, at: new Date(0), big: 10n, tags: new Set(['a']) }));
    const first = await runIdempotent(options, resolver);
    const second = await runIdempotent(options, resolver);
    expect(resolver).toHaveBeenCalledTimes(1);
    expect(first.replayed).toBe(false);
    expect(second.replayed).toBe(true);
    expect(second.value).toEqual(first.value);
    expect(second.record).toMatchObject({ key: 'k-1', scope: 'user-1', operation: 'payments.create' });
    expect(second.record.firstSeenAt).toEqual(first.record.firstSeenAt);
  });

  it('hands the resolver the claim it runs under', async () => {
    const resolver = vi.fn(async () => 'ok');
    await runIdempotent(base(), resolver);
    expect(resolver).toHaveBeenCalledWith(
      undefined,
      expect.objectContaining({ key: 'k-1', scope: 'user-1' }),
    );
  });

  it('rejects a different input or operation with the same key as a mismatch', async () => {
    const options = base();
    await runIdempotent(options, async () => 'first');
    const resolver = vi.fn(async () => 'second');
    await expect(runIdempotent({ ...options, input: { amount: 11 } }, resolver)).rejects.toBeInstanceOf(
      IdempotencyKeyMismatchError,
    );
    await expect(runIdempotent({ ...options, operation: 'refunds.create' }, resolver)).rejects.toMatchObject({
      code: 'IDEMPOTENCY_KEY_MISMATCH',
      status: 422,
    });
    expect(resolver).not.toHaveBeenCalled();
    await expect(runIdempotent(options, resolver)).resolves.toMatchObject({ value: 'first', replayed: true });
  });

  it('lets concurrent duplicates wait for the first and replay its result', async () => {
    const options = base();
    const resolver = vi.fn(async () => {
      await new Promise((resolve) => setTimeout(resolve, 30));
      return Math.random();
    });
    const results = await Promise.all(Array.from({ length: 10 }, () => runIdempotent(options, resolver)));
    expect(resolver).toHaveBeenCalledTimes(1);
    expect(new Set(results.map((r) => r.value)).size).toBe(1);
  });

  it('answers IN_PROGRESS with a retry hint when the wait exceeds waitTimeoutMs', async () => {
    const options = { ...base(), waitTimeoutMs: 20, retryAfterMs: 1500 };
    const slow = runIdempotent(
      options,
      () => new Promise((resolve) => setTimeout(() => resolve('done'), 100)),
    );
    const error = await runIdempotent(options, async () => 'dup').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyInProgressError);
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_KEY_IN_PROGRESS', status: 409, retryAfterMs: 1500 });
    expect((error as IdempotencyKeyInProgressError).retryAfterSeconds).toBe(2);
    await expect(slow).resolves.toMatchObject({ value: 'done' });
    await expect(runIdempotent(options, async () => 'dup')).resolves.toMatchObject({
      value: 'done',
      replayed: true,
    });
  });

  it('keeps no record when the resolver throws, so the key can be retried', async () => {
    const options = base();
    await expect(runIdempotent(options, async () => Promise.reject(new Error('boom')))).rejects.toThrow(
      'boom',
    );
    expect(await options.store.find('user-1', 'k-1')).toBeNull();
    await expect(runIdempotent(options, async () => 'ok')).resolves.toMatchObject({
      value: 'ok',
      replayed: false,
    });
  });

  it('stores and replays errors that replayErrors accepts', async () => {
    const options = { ...base(), replayErrors: (e: unknown) => (e as Error).message === 'declined' };
    const resolver = vi.fn(async () => {
      throw Object.assign(new Error('declined'), { code: 'CARD_DECLINED' });
    });
    await expect(runIdempotent(options, resolver)).rejects.toThrow('declined');
    const replayed = await runIdempotent(options, resolver).catch((e: unknown) => e);
    expect(replayed).toBeInstanceOf(Error);
    expect(replayed).toMatchObject({ message: 'declined', code: 'CARD_DECLINED' });
    expect(resolver).toHaveBeenCalledTimes(1);
  });

  it('treats an expired record as unseen', async () => {
    const options = { ...base(), ttlMs: 20 };
    const resolver = vi.fn(async () => 'ok');
    await runIdempotent(options, resolver);
    await new Promise((resolve) => setTimeout(resolve, 40));
    const again = await runIdempotent(options, resolver);
    expect(again.replayed).toBe(false);
    expect(resolver).toHaveBeenCalledTimes(2);
  });

  it('fails closed when the serialized result is over maxResultBytes', async () => {
    const options = { ...base(), maxResultBytes: 100 };
    await expect(runIdempotent(options, async () => 'x'.repeat(200))).rejects.toBeInstanceOf(
      IdempotencyResultTooLargeError,
    );
    expect(await options.store.find('user-1', 'k-1')).toBeNull();
  });

  it('fails the mutation, keeping nothing, when the result cannot be serialized', async () => {
    const options = base();
    await expect(runIdempotent(options, async () => ({ prototype: 1 }))).rejects.toThrow(/prototype/);
    expect(await options.store.find('user-1', 'k-1')).toBeNull();
  });

  it.each([
    ['a promise in a field', () => ({ id: 1, receipt: Promise.resolve('r-1') })],
    ['a promise in a Map', () => new Map([['receipt', Promise.resolve('r-1')]])],
    [
      'an async generator, whose body has not run',
      () =>
        (async function* () {
          yield 1;
        })(),
    ],
    ['a ReadableStream in a list', () => [new ReadableStream()]],
  ])('fails the mutation with IDEMPOTENCY_RESULT_UNSTORABLE, keeping nothing, for %s', async (_, result) => {
    // Written as they are, each would replay as {}.
    const options = base();
    const error = await runIdempotent(options, async () => result()).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'IDEMPOTENCY_RESULT_UNSTORABLE',
      message: expect.stringContaining('it holds a promise or a stream'),
    });
    expect(await options.store.find('user-1', 'k-1')).toBeNull();
  });

  it('fails the mutation, keeping nothing, when the stored result would not come back', async () => {
    const serializer = {
      serialize: (value: unknown) => JSON.stringify(value),
      deserialize: (): unknown => {
        throw new Error('unknown typed array');
      },
    };
    const options = { ...base(), serializer };
    const error = await runIdempotent(options, async () => ({ ok: true })).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'IDEMPOTENCY_RESULT_UNSTORABLE',
      status: 500,
      message: expect.stringMatching(/could not be replayed: unknown typed array/),
    });
    expect(await options.store.find('user-1', 'k-1')).toBeNull();
  });

  it("stores serializeKnown's text as it is, and serializes and reads back what it leaves", async () => {
    const serializer = {
      serialize: vi.fn((value: unknown) => JSON.stringify(value)),
      deserialize: vi.fn((text: string): unknown => JSON.parse(text)),
      serializeKnown: (value: unknown) => (typeof value === 'string' ? `"known ${value}"` : undefined),
    };
    const options = { ...base(), serializer };
    await runIdempotent(options, async () => 'text');
    expect(serializer.serialize).not.toHaveBeenCalled();
    expect(serializer.deserialize).not.toHaveBeenCalled();
    expect((await options.store.find('user-1', 'k-1'))?.result).toBe('"known text"');

    await runIdempotent({ ...options, key: 'k-2' }, async () => ({ other: true }));
    expect(serializer.serialize).toHaveBeenCalledTimes(1);
    expect(serializer.deserialize).toHaveBeenCalledWith('{"other":true}');
  });

  it("answers a claim the store's database stopped waiting for as its own wait running out", async () => {
    const stopped = new IdempotencyKeyInProgressError(0, { message: 'lock timeout' });
    const { store } = claimingStore(() => () => Promise.reject(stopped));
    const events: IdempotencyEvent[] = [];
    const resolver = vi.fn(async () => 'ran');
    const error = await runIdempotent(
      { ...base(), store, retryAfterMs: 2_500, onEvent: (e) => events.push(e) },
      resolver,
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyInProgressError);
    expect(error).toMatchObject({ retryAfterMs: 2_500, cause: stopped });
    expect(events.map((e) => e.type)).toContain('in_progress');
    expect(resolver).not.toHaveBeenCalled();
  });

  it('answers a lease claim the database stopped waiting for IDEMPOTENCY_KEY_IN_PROGRESS, with its retry hint', async () => {
    const stopped = new IdempotencyKeyInProgressError(0, { message: 'lock timeout' });
    const inner = memoryStore();
    const store = { ...inner, lease: { ...inner.lease, claim: () => Promise.reject(stopped) } };
    const events: IdempotencyEvent[] = [];
    const resolver = vi.fn(async () => 'ran');
    const error = await runIdempotent(
      { ...base(), store, mode: 'lease', retryAfterMs: 2_500, onEvent: (e) => events.push(e) },
      resolver,
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyInProgressError);
    expect(error).toMatchObject({ retryAfterMs: 2_500, cause: stopped });
    expect(events.filter((e) => e.type === 'in_progress')).toHaveLength(1);
    expect(resolver).not.toHaveBeenCalled();
  });

  it('says in_progress once when its own wait runs out before the database stops waiting', async () => {
    const stopped = new IdempotencyKeyInProgressError(0, { message: 'lock timeout' });
    const { store } = claimingStore(
      () => () => new Promise<never>((_, reject) => setTimeout(() => reject(stopped), 150)),
    );
    const events: IdempotencyEvent[] = [];
    vi.useFakeTimers();
    try {
      const call = runIdempotent(
        { ...base(), store, waitTimeoutMs: 20, onEvent: (e) => events.push(e) },
        async () => 'ran',
      ).catch((e: unknown) => e);
      await vi.advanceTimersByTimeAsync(20);
      expect(await call).toBeInstanceOf(IdempotencyKeyInProgressError);
      await vi.advanceTimersByTimeAsync(150); // the store's claim fails after the answer
    } finally {
      vi.useRealTimers();
    }
    expect(events.filter((e) => e.type === 'in_progress')).toHaveLength(1);
  });

  it('runs nothing once its own wait ran out while it took over a record no longer live', async () => {
    const inner = memoryStore();
    const expired = storedRecord({ liveForMs: 0 });
    // The takeover waits 150 ms for a row another transaction holds; the call waits 20.
    const store: Store<undefined> = {
      ...inner,
      transaction: (work) =>
        inner.transaction!((session) =>
          work({
            ...session,
            claim: async () => ({ claimed: false, existing: expired }),
            takeOver: () => new Promise((resolve) => setTimeout(() => resolve(new Date()), 150)),
          }),
        ),
    };
    const resolver = vi.fn(async () => 'ran');
    vi.useFakeTimers();
    try {
      const call = runIdempotent({ ...base(), store, waitTimeoutMs: 20 }, resolver).catch((e: unknown) => e);
      await vi.advanceTimersByTimeAsync(20);
      expect(await call).toBeInstanceOf(IdempotencyKeyInProgressError);
      await vi.advanceTimersByTimeAsync(150);
    } finally {
      vi.useRealTimers();
    }
    expect(resolver).not.toHaveBeenCalled();
  });

  it("answers the resolver's replayable error when a retry holds the key as it is stored (no savepoints)", async () => {
    // The first transaction runs the resolver; the second, which keeps its error, meets the hold.
    const { store, transactions } = claimingStore((nth) =>
      nth === 1 ? undefined : () => Promise.reject(new IdempotencyKeyInProgressError(0)),
    );
    const declined = new Error('card declined');
    const options = { ...base(), store: withoutSavepoints(store), replayErrors: () => true };
    const error = await runIdempotent(options, async () => {
      throw declined;
    }).catch((e: unknown) => e);
    expect(error).toBe(declined);
    expect(transactions()).toBe(2);
  });

  it('keeps scopes apart', async () => {
    const store = memoryStore();
    const resolver = vi.fn(async () => 'ok');
    await runIdempotent({ ...base(), store, scope: 'alice' }, resolver);
    await runIdempotent({ ...base(), store, scope: 'bob' }, resolver);
    expect(resolver).toHaveBeenCalledTimes(2);
  });

  it.each([Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY])(
    'refuses a %s scope, which would put every caller without a principal in one scope',
    async (scope) => {
      const resolver = vi.fn(async () => 'for A');
      await expect(runIdempotent({ ...base(), scope }, resolver)).rejects.toThrow(
        /scope is (NaN|-?Infinity)/,
      );
      expect(resolver).not.toHaveBeenCalled();
    },
  );

  it.each([
    ['an unpaired surrogate', 'user-\ud800'],
    ['a NUL character', 'user-\u0000'],
  ])(
    'refuses a scope holding %s, which PostgreSQL and MariaDB would store as another principal’s',
    async (_, scope) => {
      const resolver = vi.fn(async () => 'for A');
      await expect(runIdempotent({ ...base(), scope }, resolver)).rejects.toThrow(/well-formed text/);
      expect(resolver).not.toHaveBeenCalled();
      // A surrogate pair is well-formed.
      await expect(runIdempotent({ ...base(), scope: 'user-\ud83d\ude00' }, resolver)).resolves.toMatchObject(
        {
          value: 'for A',
        },
      );
    },
  );

  it('requires a scope unless the global scope is allowed', async () => {
    await expect(runIdempotent({ ...base(), scope: null }, async () => 1)).rejects.toThrow(
      /allowGlobalScope/,
    );
    await expect(runIdempotent({ ...base(), scope: '' }, async () => 1)).rejects.toThrow(/empty string/);
    await expect(
      runIdempotent({ ...base(), scope: null, allowGlobalScope: true }, async () => 1),
    ).resolves.toMatchObject({
      value: 1,
    });
  });

  it('rejects an invalid key and an unsupported input before running anything', async () => {
    const resolver = vi.fn(async () => 1);
    await expect(runIdempotent({ ...base(), key: 'has space' }, resolver)).rejects.toBeInstanceOf(
      IdempotencyKeyInvalidError,
    );
    await expect(runIdempotent({ ...base(), input: { f: () => 1 } }, resolver)).rejects.toBeInstanceOf(
      IdempotencyInputError,
    );
    expect(resolver).not.toHaveBeenCalled();
  });

  it('rejects an operation name longer than 255 characters', async () => {
    await expect(runIdempotent({ ...base(), operation: 'x'.repeat(256) }, async () => 1)).rejects.toThrow(
      /operation must be a string of 1 to 255/,
    );
  });

  it('reports what happened through onEvent', async () => {
    const events: IdempotencyEvent[] = [];
    const options = { ...base(), onEvent: (event: IdempotencyEvent) => events.push(event) };
    await runIdempotent(options, async () => 1);
    await runIdempotent(options, async () => 1);
    await runIdempotent({ ...options, input: {} }, async () => 1).catch(() => undefined);
    expect(events.map((e) => e.type)).toEqual(['claimed', 'completed', 'replayed', 'mismatch']);
    expect(events[0]).toMatchObject({ scope: 'user-1', key: 'k-1', operation: 'payments.create' });
    expect(events[0]!.durationMs).toBeGreaterThanOrEqual(0);
  });

  it('is not disturbed by an onEvent handler that throws', async () => {
    const options = {
      ...base(),
      onEvent: () => {
        throw new Error('observer bug');
      },
    };
    await expect(runIdempotent(options, async () => 1)).resolves.toMatchObject({ value: 1 });
  });
});

describe('runIdempotent: the wait for a holder', () => {
  it('counts from the transaction start, so a store slow to connect answers unavailable, not in progress', async () => {
    vi.useFakeTimers();
    try {
      const store = memoryStore();
      // A transaction that spends longer than waitTimeoutMs getting its connection, then fails to.
      const slowToConnect = Object.assign(Object.create(store), {
        async transaction() {
          await new Promise((resolve) => setTimeout(resolve, 5_000));
          throw new IdempotencyStoreUnavailableError();
        },
      });
      const call = runIdempotent(
        { ...base(), store: slowToConnect, firstAttempt: true, waitTimeoutMs: 1_000 },
        async () => 'ran',
      );
      const settled = expect(call).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
      await vi.advanceTimersByTimeAsync(5_000);
      await settled;
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('runIdempotent: the wait and the error of a duplicate in one process', () => {
  it('bounds a duplicate by one waitTimeoutMs in all, its wait for this process’s holder included', async () => {
    vi.useFakeTimers();
    try {
      const store = memoryStore({ clock: () => performance.timeOrigin + performance.now() });
      // Another server's call holds the key's row, uncommitted, for longer than anyone waits.
      const other = gate();
      const claimed = gate();
      const holder = store.transaction!(async (session) => {
        await session.claim({ ...base(), fingerprint: 'f'.repeat(64), ttlMs: 60_000 });
        claimed.open();
        await other.opened;
      });
      await claimed.opened;
      const options = { ...base(), store, waitTimeoutMs: 300 };
      // The first call of this process waits on that row; the second waits on the first, and
      // claims once the first gives up: its own wait must not start again from there.
      const first = runIdempotent(options, async () => 1).catch((error: unknown) => error);
      await vi.advanceTimersByTimeAsync(20);
      let answeredAfter = Number.NaN;
      const second = runIdempotent(options, async () => 2).catch((error: unknown) => {
        answeredAfter = performance.now() - started;
        return error;
      });
      const started = performance.now();
      await vi.advanceTimersByTimeAsync(1_000);
      expect(await first).toBeInstanceOf(IdempotencyKeyInProgressError);
      expect(await second).toBeInstanceOf(IdempotencyKeyInProgressError);
      expect(answeredAfter).toBeLessThanOrEqual(300);
      other.open();
      await holder;
    } finally {
      vi.useRealTimers();
    }
  });

  it('answers a replayable error itself when the transaction that would keep it fails (no savepoints)', async () => {
    const store = memoryStore();
    let transactions = 0;
    // The claim's transaction runs; the one keeping the error finds the database gone.
    const failingSecond: Store = Object.assign(Object.create(store), {
      transaction: (work: Parameters<NonNullable<Store['transaction']>>[0]) =>
        ++transactions > 1
          ? Promise.reject(new IdempotencyStoreUnavailableError('database down'))
          : store.transaction!(work),
    });
    const declined = new Error('card declined');
    const outcome = await runIdempotent(
      { ...base(), store: withoutSavepoints(failingSecond), replayErrors: () => true },
      async () => {
        throw declined;
      },
    ).catch((error: unknown) => error);
    // Not the store's 503: nothing committed, and the caller's own error is the answer.
    expect(outcome).toBe(declined);
    expect(await store.find(base().scope, base().key)).toBeNull();
  });

  it('answers a replayable error itself when its transaction cannot store it', async () => {
    const store = memoryStore();
    // The error is kept in the call's own transaction, whose completion finds the database gone.
    const failingCompletion = withSessions(store, () => ({
      complete: () => Promise.reject(new IdempotencyStoreUnavailableError('database down')),
    }));
    const declined = new Error('card declined');
    const outcome = await runIdempotent(
      { ...base(), store: failingCompletion, replayErrors: () => true },
      async () => {
        throw declined;
      },
    ).catch((error: unknown) => error);
    expect(outcome).toBe(declined);
    expect(await store.find(base().scope, base().key)).toBeNull();
  });

  it('keeps a replayable error in the call’s own transaction, back at the mark taken after the claim', async () => {
    const store = memoryStore();
    let transactions = 0;
    let rolledBack = 0;
    const counting = withSessions(store, (session) => {
      transactions++;
      return {
        savepoint: async () => {
          const back = await session.savepoint!();
          return (error: unknown) => {
            rolledBack++;
            return back(error);
          };
        },
      };
    });
    const declined = new Error('card declined');
    const options = { ...base(), store: counting, replayErrors: (e: unknown) => e === declined };
    await expect(
      runIdempotent(options, async () => {
        throw declined;
      }),
    ).rejects.toBe(declined);
    expect([transactions, rolledBack]).toEqual([1, 1]);
    expect(await store.find(base().scope, base().key)).toMatchObject({
      status: 'COMPLETED',
      resultIsError: true,
    });
    // Another error is not kept: no way back taken, and nothing stored.
    const other = { ...options, key: 'k-2' };
    await expect(
      runIdempotent(other, async () => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect([transactions, rolledBack]).toEqual([2, 1]);
    expect(await store.find(base().scope, 'k-2')).toBeNull();
  });

  it('throws a replayable error the store declines to go back for, and keeps it after the rollback', async () => {
    const store = memoryStore();
    let transactions = 0;
    // The store answers this error itself (a write conflict it would run again for, say).
    const declining = withSessions(store, () => {
      transactions++;
      return { savepoint: async () => async () => false };
    });
    const declined = new Error('card declined');
    const options = { ...base(), store: declining, replayErrors: (e: unknown) => e === declined };
    await expect(
      runIdempotent(options, async () => {
        throw declined;
      }),
    ).rejects.toBe(declined);
    expect(transactions).toBe(2);
    expect(await store.find(base().scope, base().key)).toMatchObject({ resultIsError: true });
  });
});

describe('runIdempotent: duplicates in one process', () => {
  it('opens no transaction for a duplicate whose read missed a call that committed while it read', async () => {
    const store = memoryStore();
    const late = gate();
    let reads = 0;
    let transactions = 0;
    // The second read sees the store before the first call commits, and answers after it committed.
    const slowSecondRead = Object.assign(Object.create(store), {
      async find(scope: string, key: string) {
        const found = await store.find(scope, key);
        if (++reads === 2) await late.opened;
        return found;
      },
      transaction(work: Parameters<NonNullable<typeof store.transaction>>[0]) {
        transactions++;
        return store.transaction!(work);
      },
    });
    const options = { ...base(), store: slowSecondRead };
    const first = runIdempotent(options, async () => 'ran');
    const duplicate = runIdempotent(options, async () => 'ran twice');
    await expect(first).resolves.toMatchObject({ value: 'ran', replayed: false });
    late.open();
    await expect(duplicate).resolves.toMatchObject({ value: 'ran', replayed: true });
    expect(transactions).toBe(1);
  });
});
