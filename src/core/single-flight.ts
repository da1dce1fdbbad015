/**
 * In-process single flight: per store backend, the keys held by a transactional call of this
 * process, each with a promise that settles once that call has committed or rolled back (and
 * stored a replayable error). A duplicate waits here holding no database connection, rather than
 * in a transaction of its own queued behind the holder's row lock; and it reads only once the
 * holder has finished, since through a single-connection adapter (Prisma's SQLite) a read would
 * see the holder's uncommitted result.
 */
export interface HeldKeys {
  readonly holders: Map<string, Promise<void>>;
  /** The calls looking at a key's record, each told when a holder of the key lets go meanwhile. */
  readonly lookers: Map<string, Set<Look>>;
}

/**
 * One call's look at a key's record: `released` once a call of this process held the key and let
 * go of it after the look began. A record read during the look may then predate that call's
 * commit: read it again rather than claim the key.
 */
export interface Look {
  released: boolean;
  end(): void;
}

const backends = new WeakMap<object, HeldKeys>();

/** The keys held in this process on `backend`. */
export function heldKeys(backend: object): HeldKeys {
  let held = backends.get(backend);
  if (!held) {
    held = { holders: new Map(), lookers: new Map() };
    backends.set(backend, held);
  }
  return held;
}

/** Marks `id` as held until the returned function is called. */
export function hold({ holders, lookers }: HeldKeys, id: string): () => void {
  let settle = () => {};
  const holding = new Promise<void>((resolve) => {
    settle = resolve;
  });
  holders.set(id, holding);
  return () => {
    if (holders.get(id) === holding) holders.delete(id);
    for (const look of lookers.get(id) ?? []) look.released = true;
    settle();
  };
}

/** Starts a look at `id`'s record (see `Look`); `end()` it once the record is read. */
export function look({ lookers }: HeldKeys, id: string): Look {
  const looks = lookers.get(id) ?? new Set<Look>();
  const current: Look = {
    released: false,
    end() {
      looks.delete(current);
      if (looks.size === 0 && lookers.get(id) === looks) lookers.delete(id);
    },
  };
  lookers.set(id, looks.add(current));
  return current;
}

/**
 * `read` (of `id`'s record), and whether a call of this process held the key at any time during it
 * (held when it began or ended, or let go meanwhile): such a read may predate that call's commit,
 * or, through a single-connection adapter (Prisma's SQLite), be its uncommitted write, which a
 * failed COMMIT undoes. Only a read nobody overlapped may be answered from, or kept.
 */
export async function readAlone<R>(
  held: HeldKeys,
  id: string,
  read: () => Promise<R>,
): Promise<{ value: R; overlapped: boolean }> {
  const heldBefore = held.holders.has(id);
  const looking = look(held, id);
  let value: R;
  try {
    value = await read();
  } finally {
    looking.end();
  }
  return { value, overlapped: heldBefore || looking.released || held.holders.has(id) };
}

/**
 * Waits while another call of this process holds `id`; `false` when `deadline` (on `clock`)
 * passed first.
 */
export async function waitForHolders(
  { holders }: HeldKeys,
  id: string,
  deadline: number,
  clock: () => number,
): Promise<boolean> {
  for (let holder = holders.get(id); holder; holder = holders.get(id)) {
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
