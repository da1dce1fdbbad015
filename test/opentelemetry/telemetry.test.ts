import { createHash } from 'node:crypto';
import { SpanStatusCode } from '@opentelemetry/api';
import { describe, expect, it, vi } from 'vitest';
import { memoryStore, type ResolverClaim, runIdempotent, type Store } from '../../src/index.js';
import {
  ATTR_ERROR_TYPE,
  ATTR_KEY_HASH,
  ATTR_MODE,
  ATTR_OPERATION,
  ATTR_OUTCOME,
  ATTR_SCOPE,
  ATTR_STEP_NAME,
  ATTR_STEP_POSITION,
  ATTR_STEP_REPLAYED,
  ATTR_TX_RETRIES,
  METRIC_CALLS,
  METRIC_RESOLVER_DURATION,
  METRIC_RESULT_SIZE,
  METRIC_STUCK_RECORDS,
  METRIC_SWEEP_DELETED,
  METRIC_TX_RETRIES,
  METRIC_WAIT_DURATION,
} from '../../src/opentelemetry/index.js';
import { paymentsSchema, yogaFor } from '../envelop/payments-yoga.js';
import { movableClock } from '../helpers/clock.js';
import { gate } from '../helpers/gate.js';
import { isChildOf, telemetryHarness } from '../helpers/telemetry.js';

function setup(options: Parameters<typeof telemetryHarness>[0] = {}) {
  const harness = telemetryHarness(options);
  const store = memoryStore();
  const call = {
    store,
    scope: 'user-1',
    key: 'key-1',
    operation: 'payments.create',
    input: { amount: 3 },
    observe: harness.telemetry.observe,
  };
  return { ...harness, store, call };
}

/** The counter's value for an outcome. */
async function callsWith(points: Awaited<ReturnType<ReturnType<typeof telemetryHarness>['points']>>) {
  return Object.fromEntries(points.map((p) => [String(p.attributes[ATTR_OUTCOME]), p.value]));
}

describe('idempotencyTelemetry on the memory store', () => {
  it('traces a fresh call as a child of the active span and the parent of the resolver’s spans', async () => {
    const { call, tracer, span, points } = setup();
    await tracer.startActiveSpan('POST /trpc/payments.create', async (request) => {
      await runIdempotent(call, async () => {
        tracer.startSpan('charge card').end();
        return { id: 'p-1' };
      });
      request.end();
    });
    const idempotency = span('idempotency payments.create');
    expect(isChildOf(idempotency, span('POST /trpc/payments.create'))).toBe(true);
    expect(isChildOf(span('charge card'), idempotency)).toBe(true);
    expect(idempotency.attributes).toEqual({
      [ATTR_OPERATION]: 'payments.create',
      [ATTR_MODE]: 'transactional',
      [ATTR_OUTCOME]: 'executed',
      [ATTR_KEY_HASH]: createHash('sha256').update('key-1').digest('hex'),
      [ATTR_TX_RETRIES]: 0,
    });
    expect(JSON.stringify(idempotency.attributes)).not.toContain('key-1');
    expect(idempotency.status.code).toBe(SpanStatusCode.UNSET);
    expect(idempotency.events.map((e) => e.name)).toEqual([
      'idempotency.claim.start',
      'idempotency.claim.end',
      'idempotency.resolver.start',
      'idempotency.resolver.end',
      'idempotency.store.start',
      'idempotency.store.end',
    ]);
    expect(await callsWith(await points(METRIC_CALLS))).toEqual({ executed: 1 });
    expect((await points(METRIC_RESOLVER_DURATION)).map((p) => (p.value as { count: number }).count)).toEqual(
      [1],
    );
    const [size] = await points(METRIC_RESULT_SIZE);
    expect(size?.value).toMatchObject({ count: 1, sum: Buffer.byteLength('{"json":{"id":"p-1"}}') });
  });

  it('traces a replay without running the resolver, and counts it', async () => {
    const { call, spans, points } = setup();
    const resolver = vi.fn(async () => 'paid');
    await runIdempotent(call, resolver);
    await runIdempotent(call, resolver);
    expect(resolver).toHaveBeenCalledTimes(1);
    const replay = spans()[1]!;
    expect(replay.attributes[ATTR_OUTCOME]).toBe('replayed');
    expect(replay.events).toEqual([]);
    expect(await callsWith(await points(METRIC_CALLS))).toEqual({ executed: 1, replayed: 1 });
  });

  it('marks a concurrent duplicate that waited for the first call as waited_then_replayed', async () => {
    let now = 0; // the call's monotonic clock, moved by hand
    const { call, spans, points } = setup();
    const timed = { ...call, clock: () => now };
    const started = gate();
    const release = gate();
    const first = runIdempotent(timed, async () => {
      started.open();
      await release.opened;
      return 'paid';
    });
    await started.opened;
    const duplicate = runIdempotent(timed, async () => 'twice');
    now += 250; // the duplicate waits 250 ms by the call's clock
    release.open();
    expect(await Promise.all([first, duplicate])).toMatchObject([
      { value: 'paid', replayed: false },
      { value: 'paid', replayed: true },
    ]);
    const waited = spans().find((s) => s.attributes[ATTR_OUTCOME] === 'waited_then_replayed');
    expect(waited?.events.map((e) => e.name)).toEqual(['idempotency.wait.start', 'idempotency.wait.end']);
    expect(await callsWith(await points(METRIC_CALLS))).toEqual({ executed: 1, waited_then_replayed: 1 });
    const [wait] = await points(METRIC_WAIT_DURATION);
    expect(wait?.value).toMatchObject({ count: 1, sum: 0.25 });
  });

  it('records a mismatch as an error with its code', async () => {
    const { call, spans, points } = setup();
    await runIdempotent(call, async () => 'paid');
    await expect(runIdempotent({ ...call, input: { amount: 4 } }, async () => 'paid')).rejects.toMatchObject({
      code: 'IDEMPOTENCY_KEY_MISMATCH',
    });
    const mismatch = spans()[1]!;
    expect(mismatch.attributes).toMatchObject({
      [ATTR_OUTCOME]: 'mismatch',
      'error.type': 'IDEMPOTENCY_KEY_MISMATCH',
    });
    expect(mismatch.status.code).toBe(SpanStatusCode.ERROR);
    // Recorded by its name and code only (its message names the key).
    expect(mismatch.events.find((e) => e.name === 'exception')?.attributes).toEqual({
      'exception.type': 'IdempotencyKeyMismatchError',
      'exception.message': 'IDEMPOTENCY_KEY_MISMATCH',
    });
    const counted = await points(METRIC_CALLS);
    expect(counted.find((p) => p.attributes[ATTR_OUTCOME] === 'mismatch')?.attributes).toMatchObject({
      'error.type': 'IDEMPOTENCY_KEY_MISMATCH',
    });
  });

  it('records a fenced lease: the old owner’s completion wrote nothing', async () => {
    const clock = movableClock();
    const harness = telemetryHarness();
    const store = memoryStore({ clock: clock.now });
    const call = {
      store,
      scope: 'user-1',
      key: 'key-1',
      operation: 'emails.send',
      input: {},
      mode: 'lease' as const,
      leaseMs: 60,
      observe: harness.telemetry.observe,
    };
    const started = gate();
    const release = gate();
    const old = runIdempotent(call, async () => {
      started.open();
      await release.opened;
      return 'old owner';
    });
    await started.opened;
    clock.advance(120); // the store's clock: the lease has run out
    await runIdempotent(call, async () => 'new owner');
    release.open();
    await expect(old).rejects.toMatchObject({ code: 'IDEMPOTENCY_KEY_IN_PROGRESS' });
    const outcomes = harness.spans().map((s) => [s.attributes[ATTR_OUTCOME], s.attributes[ATTR_MODE]]);
    expect(outcomes).toEqual([
      ['expired_takeover', 'lease'],
      ['fenced', 'lease'],
    ]);
    expect(await callsWith(await harness.points(METRIC_CALLS))).toEqual({ expired_takeover: 1, fenced: 1 });
    // Its store phase wrote nothing: it failed, as the call did.
    const fenced = harness.spans().find((s) => s.attributes[ATTR_OUTCOME] === 'fenced')!;
    const storeEnd = fenced.events.find((e) => e.name === 'idempotency.store.end');
    expect(storeEnd?.attributes).toEqual({ [ATTR_ERROR_TYPE]: 'IDEMPOTENCY_KEY_IN_PROGRESS' });
  });

  it('records no result size for a call whose committed attempt stored nothing', async () => {
    const { call, store, points } = setup();
    let runs = 0;
    // The first attempt stores its result, then its commit conflicts; the second one throws.
    const resolver = async () => {
      if (++runs === 2) throw new TypeError('card declined on the retry');
      return { id: 'p-1' };
    };
    await expect(runIdempotent({ ...call, store: conflictingOnce(store) }, resolver)).rejects.toThrow(
      'card declined',
    );
    expect(await store.find(call.scope, call.key)).toBeNull();
    expect(await points(METRIC_RESULT_SIZE)).toEqual([]);
  });

  it('counts the transaction’s retries after a write conflict', async () => {
    const { call, spans, points } = setup();
    const resolver = vi.fn(async () => 'paid');
    await runIdempotent({ ...call, store: conflictingOnce(call.store) }, resolver);
    expect(resolver).toHaveBeenCalledTimes(2);
    expect(spans()[0]?.attributes).toMatchObject({ [ATTR_OUTCOME]: 'executed', [ATTR_TX_RETRIES]: 1 });
    const [retries] = await points(METRIC_TX_RETRIES);
    expect(retries?.value).toBe(1);
  });

  it('records the scope only when asked to', async () => {
    const { call, spans } = setup({ recordScope: true });
    await runIdempotent(call, async () => 'paid');
    expect(spans()[0]?.attributes[ATTR_SCOPE]).toBe('user-1');
  });

  it('marks a resolver’s error on the span and leaves the key retryable', async () => {
    const { call, spans, points } = setup();
    await expect(
      runIdempotent(call, async () => {
        throw new TypeError('card declined');
      }),
    ).rejects.toThrow('card declined');
    const failed = spans()[0]!;
    expect(failed.status).toEqual({ code: SpanStatusCode.ERROR, message: 'card declined' });
    expect(failed.attributes).toMatchObject({ [ATTR_OUTCOME]: 'executed', 'error.type': 'TypeError' });
    expect(failed.events.find((e) => e.name === 'idempotency.resolver.end')?.attributes).toEqual({
      'error.type': 'TypeError',
    });
    expect(await points(METRIC_RESULT_SIZE)).toEqual([]);
  });

  it('ends the span, and leaves the thrown value as it is, whatever a resolver or a step throws', async () => {
    const { call, spans } = setup();
    // A value `String()` cannot convert: the observer must neither throw on it nor keep the span open.
    const odd = Object.create(null) as object;
    await expect(
      runIdempotent(call, async () => {
        throw odd;
      }),
    ).rejects.toBe(odd);
    const stepping = runIdempotent(
      { ...call, key: 'key-2', mode: 'lease' },
      async (_tx: unknown, { step }: ResolverClaim<unknown>) =>
        step!('charge', () => {
          throw odd;
        }),
    );
    await expect(stepping).rejects.toBe(odd);
    expect(spans().map((span) => [span.name, span.status])).toEqual([
      ['idempotency payments.create', { code: SpanStatusCode.ERROR, message: '[object Object]' }],
      ['idempotency step charge', { code: SpanStatusCode.ERROR, message: '[object Object]' }],
      ['idempotency payments.create', { code: SpanStatusCode.ERROR, message: '[object Object]' }],
    ]);
  });

  it('marks a call whose resolver throws undefined as failed, with error.type _OTHER', async () => {
    const { call, spans, points } = setup();
    await expect(
      runIdempotent(call, async () => {
        throw undefined;
      }),
    ).rejects.toBeUndefined();
    expect(spans()[0]?.status).toEqual({ code: SpanStatusCode.ERROR, message: 'undefined' });
    expect((await points(METRIC_CALLS)).map((p) => p.attributes)).toEqual([
      expect.objectContaining({ [ATTR_OUTCOME]: 'executed', 'error.type': '_OTHER' }),
    ]);
  });

  it('traces each step of a lease-mode call as a span, the parent of the spans its fn makes', async () => {
    const { call, tracer, spans } = setup();
    const lease = { ...call, mode: 'lease' as const };
    let charges = 0;
    const checkout =
      (crash: boolean) =>
      async (_tx: unknown, { step }: ResolverClaim<unknown>) => {
        await step!('charge', () => {
          charges++;
          tracer.startSpan('POST gateway/charges').end();
          return 'ch_1';
        });
        if (crash) throw new Error('crash after charge');
        return step!('receipt', () => {
          throw new TypeError('mail server down');
        });
      };
    await expect(runIdempotent(lease, checkout(true))).rejects.toThrow('crash after charge');
    await expect(runIdempotent(lease, checkout(false))).rejects.toThrow('mail server down');
    expect(charges).toBe(1);
    const [first, resumed] = spans().filter((s) => s.name === 'idempotency payments.create');
    const steps = spans().filter((s) => s.name.startsWith('idempotency step '));
    expect(steps.map((s) => [s.name, s.attributes[ATTR_STEP_REPLAYED], isChildOf(s, first!)])).toEqual([
      ['idempotency step charge', false, true],
      ['idempotency step charge', true, false],
      ['idempotency step receipt', false, false],
    ]);
    expect(steps.slice(1).every((s) => isChildOf(s, resumed!))).toBe(true);
    expect(isChildOf(spans().find((s) => s.name === 'POST gateway/charges')!, steps[0]!)).toBe(true);
    expect(steps[0]!.attributes).toEqual({
      [ATTR_OPERATION]: 'payments.create',
      [ATTR_MODE]: 'lease',
      [ATTR_STEP_NAME]: 'charge',
      [ATTR_STEP_POSITION]: 0,
      [ATTR_STEP_REPLAYED]: false,
    });
    expect(steps[2]!.status).toEqual({ code: SpanStatusCode.ERROR, message: 'mail server down' });
    expect(steps[2]!.attributes).toMatchObject({ [ATTR_STEP_POSITION]: 1, 'error.type': 'TypeError' });
  });

  it('counts the sweeper’s deletions and reports stuck records as a gauge', async () => {
    const { telemetry, points } = setup({ stuckRecords: async () => 3 });
    telemetry.onSweep(120);
    telemetry.onSweep(5);
    expect((await points(METRIC_SWEEP_DELETED))[0]?.value).toBe(125);
    expect((await points(METRIC_STUCK_RECORDS))[0]?.value).toBe(3);
  });

  it('reports stuck records from the first collection, before any call or sweep (a server just restarted)', async () => {
    const { points } = setup({ stuckRecords: async () => 4 });
    expect((await points(METRIC_STUCK_RECORDS))[0]?.value).toBe(4);
  });

  it('writes neither the raw key nor the scope on the span when its error message names them', async () => {
    const { call, spans } = setup();
    // A store whose key column compares case-insensitively: it returns another key's record.
    const store: Store = { ...call.store, find: (scope, key) => call.store.find(scope, key.toUpperCase()) };
    const scoped = { ...call, store, scope: 'alice@example.com' };
    await runIdempotent({ ...scoped, key: 'SECRET-KEY-42' }, async () => 1);
    await expect(runIdempotent({ ...scoped, key: 'secret-key-42' }, async () => 2)).rejects.toThrow(
      'the record of another key',
    );
    const failed = spans().at(-1)!;
    expect(failed.status.code).toBe(SpanStatusCode.ERROR);
    const written = JSON.stringify({
      attributes: failed.attributes,
      status: failed.status,
      events: failed.events,
    });
    expect(written).not.toContain('secret-key-42');
    expect(written).not.toContain('alice@example.com');
  });

  it('never lets a throwing observer change the outcome', async () => {
    const { call } = setup();
    const observe = () => ({
      phaseStart: () => {
        throw new Error('observer bug');
      },
      end: () => {
        throw new Error('observer bug');
      },
    });
    expect(await runIdempotent({ ...call, observe }, async () => 'paid')).toMatchObject({ value: 'paid' });
  });
});

/**
 * A store whose first transaction fails with a write conflict after the resolver ran, and which
 * runs the work again, as the Prisma store does on P2034.
 */
function conflictingOnce<Tx>(store: Store<Tx>): Store<Tx> {
  let conflicts = 1;
  return {
    ...store,
    find: store.find.bind(store),
    lease: store.lease,
    async transaction(work) {
      for (;;) {
        try {
          return await store.transaction!(async (session) => {
            const value = await work(session);
            if (conflicts-- > 0) throw Object.assign(new Error('write conflict'), { code: 'P2034' });
            return value;
          });
        } catch (error) {
          if ((error as { code?: string }).code !== 'P2034') throw error;
        }
      }
    },
  };
}

describe('idempotencyTelemetry under the Envelop plugin', () => {
  it('records the field’s own error of an operation under a header key, as under a field key', async () => {
    const { telemetry, spans, points } = telemetryHarness();
    const { schema } = paymentsSchema(undefined, {
      Mutation: {
        pay: () => {
          throw new TypeError('card declined');
        },
      },
    });
    const { send } = yogaFor(schema, { observe: telemetry.observe });
    await send('mutation Pay { pay(amount: 1) }', 'k-1');
    const call = spans().find((span) => span.name === 'idempotency mutation Pay')!;
    expect(call.attributes['error.type']).toBe('TypeError');
    expect(call.events.find((e) => e.name === 'idempotency.resolver.end')?.attributes).toEqual({
      'error.type': 'TypeError',
    });
    expect(call.events.find((e) => e.name === 'exception')?.attributes?.['exception.type']).toBe('TypeError');
    const [counted] = await points(METRIC_CALLS);
    expect(counted?.attributes['error.type']).toBe('TypeError');
  });
});
