/**
 * Preloaded into a child process (`node --import tsx --import ./test/helpers/shifted-clock.ts …`),
 * moves that process's clock by `TEST_CLOCK_SHIFT_MS` milliseconds: `Date.now()` and `new Date()`
 * answer the shifted time, so a test can show that a command does not depend on its own clock.
 */
const RealDate = Date;
const shift = Number(process.env.TEST_CLOCK_SHIFT_MS ?? 0);

function ShiftedDate(...args: unknown[]): Date | string {
  const date =
    args.length === 0
      ? new RealDate(RealDate.now() + shift)
      : new RealDate(...(args as ConstructorParameters<DateConstructor>));
  return new.target ? date : date.toString();
}
ShiftedDate.prototype = RealDate.prototype;
ShiftedDate.now = () => RealDate.now() + shift;
ShiftedDate.parse = RealDate.parse;
ShiftedDate.UTC = RealDate.UTC;
globalThis.Date = ShiftedDate as unknown as DateConstructor;
