import { afterAll, beforeAll, expect } from 'vitest';

/**
 * Runs the file's tests in a process whose time zone is UTC+14 (Kiritimati), so that a time read
 * or written in the process's zone instead of UTC shows as a fourteen-hour error. Node applies a
 * change of `process.env.TZ` at once; each test file runs in a process of its own.
 */
export function inFarTimeZone(): void {
  const zone = process.env.TZ;
  beforeAll(() => {
    process.env.TZ = 'Pacific/Kiritimati';
    expect(new Date().getTimezoneOffset()).toBe(-14 * 60);
  });
  afterAll(() => {
    if (zone === undefined) delete process.env.TZ;
    else process.env.TZ = zone;
  });
}
