import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IdempotencyEvent, IdempotencyKeyInProgressError } from '../../src/index.js';
import { connect, databases, uniqueScope } from '../helpers/databases.js';
import { countRecords, insertRecords } from '../helpers/records.js';
import { CardDeclinedError, chargeCard, type Gateway } from './samples/lease-mode.js';
import { startIdempotencySweeper, sweepOnce } from './samples/sweeper.js';

const sqlite = databases[0]!;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the README’s lease-mode and sweeper samples (SQLite)', () => {
  let prisma: Awaited<ReturnType<typeof connect>>;

  beforeAll(async () => {
    prisma = await connect(sqlite);
  });
  afterAll(() => prisma?.$disconnect());

  it('charges once for five concurrent requests with one key; the others get 409, a retry replays', async () => {
    const charges: string[] = [];
    const events: IdempotencyEvent[] = [];
    const gateway: Gateway = {
      async charge({ reference }) {
        charges.push(reference);
        // The charge lasts until the four duplicates have been answered.
        await expect
          .poll(() => events.filter((e) => e.type === 'in_progress').length, {
            timeout: 10_000,
            interval: 10,
          })
          .toBe(4);
        return { chargeId: `ch_${charges.length}` };
      },
    };
    const charge = chargeCard(prisma, gateway, (event) => events.push(event));
    const userId = uniqueScope();
    const input = { amount: '19.90', currency: 'EUR' };
    const outcomes = await Promise.allSettled(Array.from({ length: 5 }, () => charge(userId, 'k-1', input)));
    expect(charges).toEqual([`${userId}:k-1`]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    const rejected = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected');
    expect(rejected).toHaveLength(4);
    for (const { reason } of rejected) expect(reason).toBeInstanceOf(IdempotencyKeyInProgressError);
    await expect(charge(userId, 'k-1', input)).resolves.toMatchObject({
      value: { chargeId: 'ch_1' },
      replayed: true,
    });
    expect(await prisma.payment.count({ where: { userId } })).toBe(1);
    expect(events.filter((e) => e.type === 'claimed')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'in_progress')).toHaveLength(4);
  });

  it('replays a declined card without calling the gateway again', async () => {
    let calls = 0;
    const gateway: Gateway = {
      async charge() {
        calls++;
        throw new CardDeclinedError('card declined');
      },
    };
    const charge = chargeCard(prisma, gateway, () => undefined);
    const userId = uniqueScope();
    const input = { amount: '5.00', currency: 'EUR' };
    await expect(charge(userId, 'k', input)).rejects.toThrow('card declined');
    await expect(charge(userId, 'k', input)).rejects.toMatchObject({ code: 'CARD_DECLINED' });
    expect(calls).toBe(1);
  });

  it('sweeps expired records in the background and once on demand', async () => {
    const scope = uniqueScope();
    const past = new Date(Date.now() - 60_000);
    const rows = (prefix: string) =>
      Array.from({ length: 10 }, (_, i) => ({ scope, key: `${prefix}-${i}`, expiresAt: past }));
    await insertRecords(prisma, sqlite.provider, [
      ...rows('a'),
      { scope, key: 'live', expiresAt: new Date(Date.now() + 60_000) },
    ]);
    const stop = startIdempotencySweeper(prisma, 50);
    for (let waited = 0; waited < 10_000 && (await countRecords(prisma, 'sqlite', scope)) > 1; waited += 50) {
      await sleep(50);
    }
    await stop();
    expect(await countRecords(prisma, 'sqlite', scope)).toBe(1);
    await insertRecords(prisma, sqlite.provider, rows('b'));
    expect(await sweepOnce(prisma)).toBe(10);
    expect(await countRecords(prisma, 'sqlite', scope)).toBe(1);
  });
});
