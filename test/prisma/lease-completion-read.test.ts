import { afterAll, beforeAll, expect, it } from 'vitest';
import { type IdempotencyEvent, runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachServerDatabase, uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';
import { recordTravel } from '../helpers/record-travel.js';

// A lease completion is one statement where updates return what they wrote (PostgreSQL), and an
// UPDATE and then a read of its times on MySQL/MariaDB, each on a connection of its own. Between
// the two the record can expire (a stalled pool, a short ttlMs) and be swept or taken over by a
// retry: the result was stored all the same, and the call must answer it, not a lost lease.

const TTL_MS = 60_000;

describeEachServerDatabase('a lease completion whose record goes right after its UPDATE', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  beforeAll(async () => {
    prisma = await connect(db);
  });
  afterAll(() => prisma?.$disconnect());

  /** The store over `prisma`, running `between()` once the completion's UPDATE has answered. */
  function storeWithGap(between: () => Promise<void>) {
    const completes = (text: unknown) =>
      typeof text === 'string' &&
      text.startsWith('UPDATE') &&
      text.includes('locked_until = NULL, completed_at');
    const paused = new Proxy(prisma, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver);
        if (name !== '$executeRawUnsafe' && name !== '$queryRawUnsafe') {
          return typeof value === 'function' ? value.bind(target) : value;
        }
        return async (text: string, ...values: unknown[]) => {
          const answer = await (value as (...args: unknown[]) => Promise<unknown>).call(
            target,
            text,
            ...values,
          );
          if (completes(text)) await between();
          return answer;
        };
      },
    });
    return prismaStore(paused as typeof prisma, { provider: db.provider });
  }

  const expire = (scope: string) => recordTravel(prisma, db.provider)(scope, TTL_MS + 1_000);
  const call = (
    store: ReturnType<typeof prismaStore>,
    scope: string,
    run: () => Promise<string>,
    events: IdempotencyEvent[] = [],
  ) =>
    runIdempotent(
      {
        store,
        scope,
        key: 'k',
        operation: 'charge',
        input: {},
        mode: 'lease',
        ttlMs: TTL_MS,
        onEvent: (e) => events.push(e),
      },
      run,
    );

  it('answers the stored result when a sweep deleted the expired record in between', async () => {
    const scope = uniqueScope('completion-swept');
    const store = storeWithGap(async () => {
      await expire(scope);
      await prisma.idempotencyRecord.deleteMany({ where: { scope } }); // what the sweep does to it
    });
    const events: IdempotencyEvent[] = [];
    const outcome = await call(store, scope, async () => 'charged', events);

    expect(outcome.value).toBe('charged');
    expect(events.map((event) => event.type)).toEqual(['claimed', 'completed']);
    expect(outcome.record.expiresAt.getTime() - outcome.record.completedAt!.getTime()).toBe(TTL_MS);
  });

  it('answers its own result and times when a retry took the expired record over in between', async () => {
    const scope = uniqueScope('completion-taken-over');
    const retryHolds = gate();
    let retry: Promise<unknown> | undefined;
    const store = storeWithGap(async () => {
      await expire(scope);
      const tookOver = gate();
      retry = call(prismaStore(prisma), scope, async () => {
        tookOver.open();
        await retryHolds.opened;
        return 'second';
      });
      await tookOver.opened;
    });
    const outcome = await call(store, scope, async () => 'first');
    retryHolds.open();
    await retry;

    expect(outcome.value).toBe('first');
    expect(outcome.record.completedAt).toBeInstanceOf(Date);
    expect(outcome.record.expiresAt.getTime() - outcome.record.completedAt!.getTime()).toBe(TTL_MS);
  });
});
