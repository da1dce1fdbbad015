import { describe, expect, it } from 'vitest';
import {
  type CallObserver,
  type CallSummary,
  IdempotencyKeyInProgressError,
  IdempotencyOutcomeUnknownError,
  memoryStore,
  type ObservedCall,
  type ResolverClaim,
  type RunIdempotentOptions,
  runIdempotent,
} from '../../src/index.js';
import { movableClock } from '../helpers/clock.js';
import { gate } from '../helpers/gate.js';

/** An observer that writes down what it is told, in order. */
function recorder() {
  const calls: { call: ObservedCall; steps: string[]; summary?: CallSummary; ends: number }[] = [];
  const observe = (call: ObservedCall): CallObserver => {
    const seen: (typeof calls)[number] = { call, steps: [], ends: 0 };
    calls.push(seen);
    return {
      around: (run) => {
        seen.steps.push('around');
        return run();
      },
      phaseStart: (phase) => seen.steps.push(`${phase}.start`),
      phaseEnd: (phase, _at, error) => seen.steps.push(`${phase}.end${error ? ' (error)' : ''}`),
      step: async (step, run) => {
        seen.steps.push(`step ${step.position} ${step.name}${step.replayed ? ' (replayed)' : ''}`);
        try {
          return await run();
        } finally {
          seen.steps.push(`step ${step.name} end`);
        }
      },
      end: (summary) => {
        seen.ends++;
        seen.summary = summary;
      },
    };
  };
  return { calls, observe };
}

function options(overrides: Partial<RunIdempotentOptions> = {}) {
  const { observe, calls } = recorder();
  const clock = movableClock();
  const base = {
    store: memoryStore({ clock: clock.now }),
    scope: 'user-1',
    key: 'key-1',
    operation: 'payments.create',
    input: { amount: 3 },
    keySource: 'header' as const,
    observe,
    ...overrides,
  };
  return { base, calls, clock };
}

describe('the observe hook', () => {
  it('reports a fresh transactional call’s phases in order, then its end once', async () => {
    const { base, calls } = options();
    await runIdempotent(base, async () => 'paid');
    expect(calls).toHaveLength(1);
    const [only] = calls;
    expect(only?.call).toMatchObject({
      scope: 'user-1',
      key: 'key-1',
      operation: 'payments.create',
      mode: 'transactional',
      keySource: 'header',
      fingerprint: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    expect(only?.steps).toEqual([
      'around',
      'claim.start',
      'claim.end',
      'resolver.start',
      'resolver.end',
      'store.start',
      'store.end',
    ]);
    expect(only?.ends).toBe(1);
    expect(only?.summary).toMatchObject({
      outcome: 'executed',
      failed: false,
      error: undefined,
      txRetries: 0,
      resultBytes: expect.any(Number),
    });
  });

  it.each([false, true])(
    'ends the store phase with the error of a completion that throws at once (sent with the commit: %s)',
    async (completesWithCommit) => {
      const inner = memoryStore();
      const failure = new Error('no connection');
      const store = Object.assign(Object.create(inner), {
        transaction: (work: Parameters<NonNullable<typeof inner.transaction>>[0]) =>
          inner.transaction!((session) =>
            work({
              ...session,
              completesWithCommit,
              complete: () => {
                throw failure;
              },
            }),
          ),
      });
      const { base, calls } = options({ store });
      await expect(runIdempotent(base, async () => 'paid')).rejects.toBe(failure);
      expect(calls[0]?.steps.slice(-2)).toEqual(['store.start', 'store.end (error)']);
    },
  );

  it.each([
    ['lease', { mode: 'lease' as const }],
    ['transactional', {}],
  ])(
    'reports a resolver that throws in %s mode: the error, and no stored result',
    async (mode, overrides) => {
      const { base, calls } = options(overrides);
      const failure = new Error('gateway down');
      await expect(
        runIdempotent(base, async () => {
          throw failure;
        }),
      ).rejects.toBe(failure);
      expect(calls[0]?.steps).toContain('resolver.end (error)');
      expect(calls[0]?.summary).toMatchObject({
        outcome: mode === 'lease' ? 'released' : 'executed',
        error: failure,
        resultBytes: undefined,
      });
    },
  );

  it('reports a lease-mode duplicate refused while the lease runs as in_progress', async () => {
    // Without a short wait, the duplicate would wait out the default 10 s for the first call's result.
    const { base, calls } = options({ mode: 'lease', waitTimeoutMs: 50 });
    const started = gate();
    const release = gate();
    const first = runIdempotent(base, async () => {
      started.open();
      await release.opened;
      return 'sent';
    });
    await started.opened;
    await expect(runIdempotent(base, async () => 'twice')).rejects.toMatchObject({
      code: 'IDEMPOTENCY_KEY_IN_PROGRESS',
    });
    release.open();
    await first;
    expect(calls.map((c) => c.summary?.outcome)).toEqual(['executed', 'in_progress']);
  });

  it('reports an expired record replaced by a new claim as expired_takeover', async () => {
    const { base, calls, clock } = options({ ttlMs: 1_000 });
    await runIdempotent(base, async () => 'first');
    clock.advance(2_000);
    await runIdempotent(base, async () => 'second');
    expect(calls.map((c) => c.summary?.outcome)).toEqual(['executed', 'expired_takeover']);
  });

  it('reports a replayed stored error with the error and the outcome replayed', async () => {
    const { base, calls } = options({ replayErrors: () => true });
    const declined = Object.assign(new Error('card declined'), { code: 'card_declined' });
    await expect(
      runIdempotent(base, async () => {
        throw declined;
      }),
    ).rejects.toBe(declined);
    await expect(runIdempotent(base, async () => 'never')).rejects.toMatchObject({
      message: 'card declined',
    });
    expect(calls.map((c) => c.summary?.outcome)).toEqual(['executed', 'replayed']);
    expect(calls[0]?.steps.filter((s) => s.startsWith('store'))).toEqual(['store.start', 'store.end']);
    expect(calls[1]?.summary?.error).toMatchObject({ code: 'card_declined' });
  });

  it('reports each step of a lease-mode call inside the resolver phase, and which ones a resumed call replayed', async () => {
    const { base, calls } = options({ mode: 'lease' });
    const runs: string[] = [];
    const checkout =
      (crash: boolean) =>
      async (_tx: unknown, { step }: ResolverClaim<unknown>) => {
        await step!('reserve', () => runs.push('reserve'));
        if (crash) throw new Error('crash after reserve');
        return step!('charge', () => runs.push('charge'));
      };
    await expect(runIdempotent(base, checkout(true))).rejects.toThrow('crash after reserve');
    await runIdempotent(base, checkout(false));
    expect(runs).toEqual(['reserve', 'charge']);
    const resolverPhase = (steps: string[]) =>
      steps.slice(steps.indexOf('resolver.start'), steps.findIndex((s) => s.startsWith('resolver.end')) + 1);
    expect(resolverPhase(calls[0]!.steps)).toEqual([
      'resolver.start',
      'step 0 reserve',
      'step reserve end',
      'resolver.end (error)',
    ]);
    expect(resolverPhase(calls[1]!.steps)).toEqual([
      'resolver.start',
      'step 0 reserve (replayed)',
      'step reserve end',
      'step 1 charge',
      'step charge end',
      'resolver.end',
    ]);
  });

  it.each([
    [
      'throws before running it',
      () => {
        throw new Error('observer broke');
      },
    ],
    [
      'throws after running it (twice)',
      async (_step: unknown, run: () => Promise<unknown>) => {
        await run();
        run();
        throw new Error('observer broke');
      },
    ],
  ])('answers with a step’s own result, run once, when the observer’s step hook %s', async (_name, hook) => {
    const runs: string[] = [];
    const { base } = options({
      mode: 'lease',
      observe: () => ({ step: hook as CallObserver['step'], end: () => undefined }),
    });
    const result = await runIdempotent(base, async (_tx, { step }) =>
      step!('charge', () => runs.push('charge')),
    );
    expect(result).toMatchObject({ value: 1, replayed: false });
    expect(runs).toEqual(['charge']);
  });

  it.each([
    [
      'throws before running the call',
      (_run: () => unknown) => {
        throw new Error('observer broke');
      },
    ],
    [
      'rejects before running the call',
      async (_run: () => unknown) => {
        throw new Error('observer broke');
      },
    ],
    [
      'throws after running the call',
      (run: () => unknown) => {
        run();
        throw new Error('observer broke');
      },
    ],
    [
      'rejects after the call ended',
      async (run: () => unknown) => {
        await run();
        throw new Error('observer broke');
      },
    ],
    ['never runs the call', (_run: () => unknown) => 'something else'],
    [
      'runs the call twice',
      (run: () => unknown) => {
        run();
        return run();
      },
    ],
    [
      'returns something else',
      async (run: () => unknown) => {
        await run();
        return 'something else';
      },
    ],
  ])(
    'answers with the call’s own outcome, run once, when the observer’s around %s',
    async (_name, around) => {
      const runs: string[] = [];
      const ends: CallSummary[] = [];
      const { base } = options({
        observe: () => ({ around: around as CallObserver['around'], end: (summary) => ends.push(summary) }),
      });
      const result = await runIdempotent(base, async () => {
        runs.push('pay');
        return 'paid';
      });
      expect(result).toMatchObject({ value: 'paid', replayed: false });
      expect(runs).toEqual(['pay']);
      expect(ends).toMatchObject([{ outcome: 'executed', error: undefined }]);
      // The stored result is the one answered: a retry replays it.
      expect(await runIdempotent(base, async () => 'again')).toMatchObject({ value: 'paid', replayed: true });
    },
  );

  it('leaves no unhandled rejection when around runs the call, drops its promise and settles later', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const { base } = options({
        observe: () => ({
          around: ((run: () => unknown) => {
            run();
            return new Promise((resolve) => setTimeout(resolve, 20));
          }) as CallObserver['around'],
          end: () => undefined,
        }),
      });
      await expect(
        runIdempotent(base, async () => {
          throw new Error('declined');
        }),
      ).rejects.toThrow('declined');
      await new Promise((resolve) => setTimeout(resolve, 10));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('answers with the resolver’s own error through an around that passes it on', async () => {
    const { base } = options({
      observe: () => ({
        around: (async (run: () => unknown) => {
          try {
            return await run();
          } catch {
            throw new Error('the observer’s own');
          }
        }) as CallObserver['around'],
        end: () => undefined,
      }),
    });
    await expect(
      runIdempotent(base, async () => {
        throw new Error('declined');
      }),
    ).rejects.toThrow('declined');
  });

  it('keeps outcome_unknown as the outcome of a lease call whose step could not be stored, though its key is freed after', async () => {
    const inner = memoryStore();
    const steps = Object.assign(Object.create(inner.steps!), {
      save: async () => {
        throw new Error('the database went away');
      },
    });
    const events: string[] = [];
    const { base, calls } = options({
      store: Object.assign(Object.create(inner), { steps }),
      mode: 'lease',
      onEvent: (event) => events.push(event.type),
    });
    await expect(
      runIdempotent(base, async (_tx, { step }) => step!('charge', async () => 'charged')),
    ).rejects.toMatchObject({ code: 'IDEMPOTENCY_OUTCOME_UNKNOWN' });
    expect(events).toEqual(['claimed', 'outcome_unknown', 'released']);
    expect(calls[0]?.summary).toMatchObject({ outcome: 'outcome_unknown', failed: true });
  });

  it('reports no outcome_unknown for a transactional call whose resolver throws a nested call’s', async () => {
    const events: string[] = [];
    const { base, calls } = options({ onEvent: (event) => events.push(event.type) });
    const nested = new IdempotencyOutcomeUnknownError('The nested payment ran, but …');
    await expect(
      runIdempotent(base, async () => {
        throw nested;
      }),
    ).rejects.toBe(nested);
    expect(events).toEqual(['claimed']);
    expect(calls[0]?.summary).toMatchObject({ outcome: 'executed', failed: true, error: nested });
    // Its transaction rolled back: the key is free.
    expect(await runIdempotent(base, async () => 'paid')).toMatchObject({ value: 'paid', replayed: false });
  });

  it('reports in_progress once when the database stops waiting for the claim just before the call would', async () => {
    const inner = memoryStore();
    const rolledBack = gate();
    const store = Object.assign(Object.create(inner), {
      transaction: async (work: Parameters<NonNullable<typeof inner.transaction>>[0]) => {
        try {
          return await inner.transaction!((session) =>
            work({
              ...session,
              claim: async () => {
                await new Promise((resolve) => setTimeout(resolve, 30));
                throw new IdempotencyKeyInProgressError(1_000);
              },
            }),
          );
        } finally {
          // A rollback that outlasts the call's own wait.
          await new Promise((resolve) => setTimeout(resolve, 60));
          rolledBack.open();
        }
      },
    });
    const events: string[] = [];
    const { base, calls } = options({
      store,
      waitTimeoutMs: 50,
      onEvent: (event) => events.push(event.type),
    });
    await expect(runIdempotent(base, async () => 'paid')).rejects.toMatchObject({
      code: 'IDEMPOTENCY_KEY_IN_PROGRESS',
    });
    await rolledBack.opened;
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(events).toEqual(['in_progress']);
    expect(calls[0]?.steps).toEqual(['around', 'claim.start', 'claim.end (error)']);
  });

  it('ends the claim phase before the call when its wait runs out while the claim waits', async () => {
    const inner = memoryStore();
    const claimed = gate();
    const store = Object.assign(Object.create(inner), {
      transaction: (work: Parameters<NonNullable<typeof inner.transaction>>[0]) =>
        inner.transaction!((session) =>
          work({
            ...session,
            claim: async (request) => {
              await new Promise((resolve) => setTimeout(resolve, 100));
              try {
                return await session.claim(request);
              } finally {
                claimed.open();
              }
            },
          }),
        ),
    });
    const order: string[] = [];
    const { base } = options({
      store,
      waitTimeoutMs: 30,
      observe: () => ({
        phaseStart: (phase) => order.push(`${phase}.start`),
        phaseEnd: (phase, _at, error) => order.push(`${phase}.end${error ? ' (error)' : ''}`),
        end: ({ outcome }) => order.push(`end ${outcome}`),
      }),
    });
    await expect(runIdempotent(base, async () => 'paid')).rejects.toMatchObject({
      code: 'IDEMPOTENCY_KEY_IN_PROGRESS',
    });
    await claimed.opened;
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(order).toEqual(['claim.start', 'claim.end (error)', 'end in_progress']);
  });

  it.each(['transactional', 'lease'] as const)(
    'reports a %s resolver that throws undefined as failed',
    async (mode) => {
      const { base, calls } = options({ mode });
      await expect(
        runIdempotent(base, async () => {
          throw undefined;
        }),
      ).rejects.toBeUndefined();
      expect(calls[0]?.summary).toMatchObject({ failed: true, error: undefined });
    },
  );

  it('is not called for a call refused before it could claim', async () => {
    const { base, calls } = options({ key: '' });
    await expect(runIdempotent(base, async () => 'paid')).rejects.toMatchObject({
      code: 'IDEMPOTENCY_KEY_INVALID',
    });
    expect(calls).toEqual([]);
  });

  it('leaves a call unobserved when observe returns undefined', async () => {
    const { base } = options({ observe: () => undefined });
    expect(await runIdempotent(base, async () => 'paid')).toMatchObject({ value: 'paid', replayed: false });
  });
});
