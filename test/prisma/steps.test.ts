import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  IdempotencyLeaseLostError,
  type ResolverClaim,
  type RunIdempotentOptions,
  runIdempotent,
  type Store,
} from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

describeEachDatabase('durable steps in prismaStore', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let store: ReturnType<typeof prismaStore<typeof prisma>>;
  type Tx = typeof store extends Store<infer T> ? T : never;
  beforeAll(async () => {
    prisma = await connect(db);
    store = prismaStore(prisma);
  });
  afterAll(() => prisma?.$disconnect());

  const placeholders = (sql: string) => {
    let n = 0;
    return db.provider === 'postgresql' ? sql.replace(/\?/g, () => `$${++n}`) : sql;
  };
  /** Another server takes the key over, as after this call's lease ran out. */
  const takenOver = (scope: string) =>
    prisma.$executeRawUnsafe(
      placeholders('UPDATE idempotency_records SET owner_token = ? WHERE scope = ?'),
      'b'.repeat(64),
      scope,
    );
  const paymentsOf = (scope: string) => prisma.payment.count({ where: { userId: scope } });
  const options = (scope: string): RunIdempotentOptions<Tx> => ({
    store,
    scope,
    key: 'order-1',
    operation: 'checkout',
    input: { sku: 'book' },
    mode: 'lease',
  });
  const pay =
    (scope: string) =>
    async ({ tx }: { tx: Tx }) => {
      const payment = await tx.payment.create({
        data: { userId: scope, amount: new Decimal('9.90'), currency: 'EUR' },
      });
      return payment.id;
    };

  it('commits a transactional step’s writes with its record, and replays it without writing again', async () => {
    const scope = uniqueScope();
    let crash = true;
    const resolver = async (_tx: Tx, { step }: ResolverClaim<Tx>) => {
      const id = await step!('pay', pay(scope), { transactional: true });
      if (crash) throw new Error('crash after pay');
      return id;
    };
    await expect(runIdempotent(options(scope), resolver)).rejects.toThrow('crash after pay');
    crash = false;
    const { value } = await runIdempotent(options(scope), resolver);
    expect(await paymentsOf(scope)).toBe(1);
    expect(await prisma.payment.findFirst({ where: { userId: scope } })).toMatchObject({ id: value });
  });

  it('rolls a transactional step’s writes back when its lease was taken over (fenced)', async () => {
    const scope = uniqueScope();
    const error = await runIdempotent(options(scope), async (_tx, { step }) => {
      await takenOver(scope);
      return step!('pay', pay(scope), { transactional: true });
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyLeaseLostError);
    expect(await paymentsOf(scope)).toBe(0);
    expect(await store.steps!.list(scope, 'order-1')).toEqual([]);
  });

  it('refuses a plain step’s record once the lease was taken over, and stops the call there', async () => {
    const scope = uniqueScope();
    let shipped = 0;
    const error = await runIdempotent(options(scope), async (_tx, { step }) => {
      await step!('reserve', () => 'reserved');
      await takenOver(scope);
      await step!('charge', () => 'charged');
      return step!('ship', () => shipped++);
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyLeaseLostError);
    expect(shipped).toBe(0);
    expect((await store.steps!.list(scope, 'order-1')).map((s) => s.name)).toEqual(['reserve']);
  });
});
