import { describe, expect, it } from 'vitest';
import { retryAfterMs, retryDelay, sleep } from '../../src/client/retry-policy.js';

const network = { kind: 'network' } as const;
const status = (code: number, retryAfter?: string) => ({ kind: 'status', status: code, retryAfter }) as const;

describe('retryDelay', () => {
  it.each([400, 401, 403, 404, 422, 429, 500, 502])('never retries a %i', (code) => {
    expect(retryDelay(status(code), 1)).toBeUndefined();
  });

  it.each([
    ['a network failure', network],
    ['a 409', status(409)],
    ['a 503', status(503)],
  ])('retries %s until the attempts are used up', (_, failure) => {
    const options = { attempts: 3 };
    expect(retryDelay(failure, 1, options)).toBeTypeOf('number');
    expect(retryDelay(failure, 2, options)).toBeTypeOf('number');
    expect(retryDelay(failure, 3, options)).toBeUndefined();
  });

  it('never retries a 409 or 503 that the response shows is not the idempotency layer’s', () => {
    expect(retryDelay({ ...status(409), idempotent: false }, 1)).toBeUndefined();
    expect(retryDelay({ ...status(503), idempotent: false }, 1)).toBeUndefined();
    expect(retryDelay({ ...status(409), idempotent: true }, 1)).toBeTypeOf('number');
  });

  it.each([408, 502, 503, 504])('retries a proxy’s %i: the server’s answer was lost on the way', (code) => {
    expect(retryDelay({ ...status(code), fromProxy: true }, 1)).toBeTypeOf('number');
  });

  it.each([400, 403, 429, 500])('never retries a proxy’s %i', (code) => {
    expect(retryDelay({ ...status(code), fromProxy: true }, 1)).toBeUndefined();
  });

  it('doubles the step each attempt, waits between half of it and all of it, and caps it', () => {
    const options = { attempts: Number.POSITIVE_INFINITY, baseDelayMs: 100, maxDelayMs: 1_000 };
    const bounds = (attempt: number) => [
      retryDelay(network, attempt, options, () => 0),
      retryDelay(network, attempt, options, () => 1),
    ];
    expect(bounds(1)).toEqual([50, 100]);
    expect(bounds(2)).toEqual([100, 200]);
    expect(bounds(4)).toEqual([400, 800]);
    expect(bounds(5)).toEqual([500, 1_000]);
    expect(bounds(30)).toEqual([500, 1_000]);
  });

  it('waits at least as long as Retry-After asks, up to maxDelayMs', () => {
    const options = { baseDelayMs: 100, maxDelayMs: 10_000 };
    expect(retryDelay(status(409, '2'), 1, options, () => 0)).toBe(2_000);
    expect(retryDelay(status(503, '60'), 1, options, () => 0)).toBe(10_000);
    expect(retryDelay(status(409, 'soon'), 1, options, () => 0)).toBe(50);
  });

  it('never asks for a delay setTimeout cannot keep (it would fire at once)', () => {
    const month = { baseDelayMs: 100, maxDelayMs: 40 * 86_400_000 };
    expect(retryDelay(status(503, String(30 * 86_400)), 1, month, () => 0)).toBe(2 ** 31 - 1);
  });

  it('prefers the finer retryAfterMs of the body to the Retry-After header', () => {
    const failure = { kind: 'status', status: 409, retryAfter: '1', retryAfterMs: 300 } as const;
    expect(retryDelay(failure, 1, { baseDelayMs: 100 }, () => 0)).toBe(300);
  });
});

describe('retryAfterMs', () => {
  it('reads delay-seconds and HTTP dates, and ignores anything else', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs('3', now)).toBe(3_000);
    expect(retryAfterMs(' 0 ', now)).toBe(0);
    expect(retryAfterMs('Thu, 01 Jan 2026 00:00:05 GMT', now)).toBe(5_000);
    expect(retryAfterMs('Wed, 31 Dec 2025 23:00:00 GMT', now)).toBe(0);
    expect(retryAfterMs('-1', now)).toBeUndefined();
    expect(retryAfterMs('', now)).toBeUndefined();
    expect(retryAfterMs(null, now)).toBeUndefined();
  });

  it('reads the two obsolete HTTP date forms, and takes no other text for a date', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs('Thursday, 01-Jan-26 00:00:07 GMT', now)).toBe(7_000);
    expect(retryAfterMs('Thu Jan  1 00:00:09 2026', now)).toBe(9_000);
    // Date.parse takes each of these for a date (the first a year ahead: a retry after the longest wait).
    expect(retryAfterMs('Retry in 2027', now)).toBeUndefined();
    expect(retryAfterMs('a 1', now)).toBeUndefined();
    expect(retryAfterMs('Jan 1 2027', now)).toBeUndefined();
  });
});

describe('sleep', () => {
  it('rejects with the reason as soon as the signal aborts', async () => {
    const controller = new AbortController();
    const waiting = sleep(60_000, controller.signal);
    controller.abort(new Error('stop'));
    await expect(waiting).rejects.toThrow('stop');
  });
});
