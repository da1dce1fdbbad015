import { metrics, trace } from '@opentelemetry/api';
import { expect, it } from 'vitest';
import { memoryStore, runIdempotent } from '../../src/index.js';
import { ATTR_OUTCOME, idempotencyTelemetry, METRIC_CALLS } from '../../src/opentelemetry/index.js';
import { telemetryHarness } from '../helpers/telemetry.js';

const call = {
  scope: 'user-1',
  key: 'key-1',
  operation: 'payments.create',
  fingerprint: 'f',
  keySource: undefined,
  firstAttempt: false,
};

it('observes nothing while no OpenTelemetry SDK is registered, then follows the SDK registered later', async () => {
  // Made before any SDK exists, as a module-level `idempotencyTelemetry()` often is.
  const telemetry = idempotencyTelemetry();
  expect(telemetry.observe({ ...call, mode: 'transactional' })).toBeUndefined();

  const sdk = telemetryHarness();
  trace.setGlobalTracerProvider(sdk.tracerProvider);
  metrics.setGlobalMeterProvider(sdk.meterProvider);
  try {
    const options = {
      store: memoryStore(),
      scope: 'user-1',
      key: 'key-1',
      operation: 'payments.create',
      input: {},
    };
    await runIdempotent({ ...options, observe: telemetry.observe }, async () => 'paid');
    expect(sdk.span('idempotency payments.create').attributes[ATTR_OUTCOME]).toBe('executed');
    const counted = await sdk.points(METRIC_CALLS);
    expect(counted.map((p) => [p.attributes[ATTR_OUTCOME], p.value])).toEqual([['executed', 1]]);
  } finally {
    trace.disable();
    metrics.disable();
  }
});
