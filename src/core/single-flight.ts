/**
 * In-process single flight: per store backend, the keys held by a transactional call of this
 * process, each with a promise that settles once that call has committed or rolled back (and
 * stored a replayable error). A duplicate waits here holding no database connection, rather than
 * in a transaction of its own queued behind the holder's row lock; and it reads only once the
 * holder has finished, since through a single-connection adapter (Prisma's SQLite) a read would
 * see the holder's uncommitted result.
 */
const holders = new WeakMap<object, Map<string, Promise<void>>>();

/** The keys held in this process on `backend`. */
export function heldKeys(backend: object): Map<string, Promise<void>> {
  let held = holders.get(backend);
  if (!held) {
    held = new Map();
    holders.set(backend, held);
  }
  return held;
}

/** Marks `id` as held until the returned function is called. */
export function hold(held: Map<string, Promise<void>>, id: string): () => void {
  let settle = () => {};
  const holding = new Promise<void>((resolve) => {
    settle = resolve;
  });
  held.set(id, holding);
  return () => {
    if (held.get(id) === holding) held.delete(id);
    settle();
  };
}

/**
 * Waits while another call of this process holds `id`; `false` when `deadline` (on `clock`)
 * passed first.
 */
export async function waitForHolders(
  held: Map<string, Promise<void>>,
  id: string,
  deadline: number,
  clock: () => number,
): Promise<boolean> {
  for (let holder = held.get(id); holder; holder = held.get(id)) {
    if (!(await settlesBefore(holder, deadline, clock))) return false;
  }
  return true;
}

async function settlesBefore(
  promise: Promise<void>,
  deadline: number,
  clock: () => number,
): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, deadline - clock()), false);
  });
  try {
    return await Promise.race([promise.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}
