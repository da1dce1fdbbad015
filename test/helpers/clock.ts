/** A clock tests move by hand: real time plus an offset, so time can jump without sleeping. */
export interface MovableClock {
  /** Epoch milliseconds, as `Date.now` gives them. */
  now: () => number;
  /** Moves the clock forward (or back, with a negative `ms`). */
  advance(ms: number): void;
}

export function movableClock(offsetMs = 0): MovableClock {
  let offset = offsetMs;
  return {
    now: () => Date.now() + offset,
    advance(ms) {
      offset += ms;
    },
  };
}
