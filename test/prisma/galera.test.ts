import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caughtUp, runStorm } from '../../bench/storm/storm.js';
import { PrismaClient as MysqlClient } from '../../generated/mysql/client.js';
import { type IdempotencyEventType, IdempotencyLeaseLostError, runIdempotent } from '../../src/index.js';
import { adapterForUrl, prismaStore } from '../../src/prisma/index.js';
import { uniqueScope } from '../helpers/databases.js';
import { type GaleraCluster, startGaleraCluster } from '../helpers/galera-cluster.js';
import { gate } from '../helpers/gate.js';
import { until } from '../helpers/private-server.js';
import { countRecords } from '../helpers/records.js';

/**
 * The store on a 3-node multi-primary Galera cluster: a smaller exactly-once storm (the full one:
 * `npm run test:galera`), a transaction aborted in the background by another node's write, and a
 * lease taken over on another node. It starts a cluster (one for the whole file), so it runs only
 * when asked (`TEST_GALERA=1`), and then a cluster that cannot start fails the suite instead of
 * skipping it.
 */
const wanted = Boolean(process.env.TEST_GALERA);

(wanted ? describe : describe.skip)('a multi-primary Galera cluster', () => {
  let cluster: GaleraCluster;
  /** One client per node. */
  let nodes: MysqlClient[];

  beforeAll(async () => {
    cluster = await startGaleraCluster(3, '32M');
    nodes = await Promise.all(
      cluster.urls.map(async (url) => new MysqlClient({ adapter: (await adapterForUrl(url)) as never })),
    );
  }, 120_000);
  afterAll(async () => {
    await Promise.all((nodes ?? []).map((node) => node.$disconnect()));
    await cluster?.destroy();
  });

  /** Payments of `userId`, read on node 1 once it has committed every write set any node had. */
  async function payments(userId: string): Promise<number> {
    await caughtUp(nodes[0]!, nodes);
    return nodes[0]!.payment.count({ where: { userId } });
  }

  it.each(['transactional', 'lease'] as const)(
    'exactly once, %s mode: 4 server processes on 3 nodes, 100 keys × 8 duplicates, one payment per key and one answer',
    async (mode) => {
      // A request without a final answer in 30 s fails the storm, saying what each node holds for it.
      const report = await runStorm({
        urls: cluster.urls,
        mode,
        processes: 4,
        keys: 100,
        duplicates: 8,
        answerTimeoutMs: 30_000,
      });
      // A node that died or stalled says so here, and its log with it (the folder goes with the cluster).
      expect(report.failures, report.failures.length ? await cluster.nodes() : undefined).toEqual([]);
      expect(report.effects).toEqual({ once: 100, none: 0, more: 0 });
      expect(report.identicalKeys).toBe(100);
      // Every duplicate but the one that ran was answered from the stored result.
      expect(report.replays).toBe(100 * 7);
    },
    300_000,
  );

  describe('a transaction another node’s write aborts while the resolver runs', () => {
    /**
     * The resolver, on node 1, pays and updates an order row; on its first run it then waits while
     * node 2 commits its own update of that row. Node 1 applies that write set and aborts the
     * resolver's transaction in the background (a "brute force" abort): its writes are gone, and
     * the session answers 1213 to its next statement. `next` is what the resolver does then.
     */
    async function abortedOnce(
      next: (tx: Parameters<Parameters<MysqlClient['$transaction']>[0]>[0]) => Promise<unknown>,
    ) {
      const scope = uniqueScope();
      const order = await nodes[0]!.order.create({
        data: { userId: scope, sku: 'sku-1', quantity: 1, total: new Decimal('5.00') },
      });
      const store = prismaStore(nodes[0]!, { maxRetries: 3 });
      const inside = gate();
      const aborted = gate();
      let runs = 0;
      const call = runIdempotent(
        { store, scope, key: 'pay-1', operation: 'payments.create', input: { amount: '5.00' } },
        async (tx) => {
          runs++;
          const row = await tx.payment.create({
            data: { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' },
          });
          await tx.order.update({ where: { id: order.id }, data: { quantity: { increment: 1 } } });
          if (runs === 1) {
            inside.open();
            await aborted.opened;
            await next(tx);
          }
          return { paymentId: row.id };
        },
      );
      await inside.opened;
      await nodes[1]!.order.update({ where: { id: order.id }, data: { quantity: 100 } });
      // Node 1 has aborted the resolver's transaction once it reads node 2's write: its applier
      // could commit that write only after the abort released the row's lock. (A read with
      // wsrep_sync_wait = 1 returned before the abort about once in 15 runs.)
      await until(
        'node 1 reads node 2’s write',
        async () => (await nodes[0]!.order.findUnique({ where: { id: order.id } }))?.quantity === 100,
        10_000,
      );
      aborted.open();
      const result = await call;
      return { result, runs, scope, store };
    }

    it('a statement that gets 1213: the transaction runs again and pays once', async () => {
      const { result, runs, scope } = await abortedOnce((tx) => tx.payment.count());
      expect(result.replayed).toBe(false);
      expect(runs).toBe(2);
      expect(await payments(scope)).toBe(1);
    }, 60_000);

    it('an error of the resolver’s own, with no statement after the abort: the transaction runs again and pays once', async () => {
      const { result, runs, scope } = await abortedOnce(async () => {
        throw new TypeError("Cannot read properties of null (reading 'id')");
      });
      expect(result.replayed).toBe(false);
      expect(runs).toBe(2);
      expect(await payments(scope)).toBe(1);
      expect(await countRecords(nodes[2]!, 'mysql', scope)).toBe(1);
    }, 60_000);
  });

  it('a lease that runs out on node 1 is taken over on node 2, and the stale owner’s completion is fenced', async () => {
    const scope = uniqueScope();
    const base = { scope, key: 'pay-1', operation: 'payments.create', input: { amount: '5.00' } };
    const events: Record<string, IdempotencyEventType[]> = { a: [], b: [] };
    const pay = (node: MysqlClient, answer: string) => async () => {
      await node.payment.create({ data: { userId: scope, amount: new Decimal('5.00'), currency: 'EUR' } });
      return answer;
    };
    const aPaid = gate();
    const aRelease = gate();
    // A, on node 1: a 500 ms lease and no heartbeat, so it runs out while A's resolver waits.
    const a = runIdempotent(
      {
        ...base,
        store: prismaStore(nodes[0]!),
        mode: 'lease',
        leaseMs: 500,
        onEvent: (e) => events.a!.push(e.type),
      },
      async () => {
        const answer = await pay(nodes[0]!, 'A')();
        aPaid.open();
        await aRelease.opened;
        return answer;
      },
    ).catch((e: unknown) => e);
    await aPaid.opened;
    // Node 2 sees A's lease, then sees it run out, by the database's clock.
    await until(
      'A’s lease has run out on node 2',
      async () => {
        const [row] = await nodes[1]!.$queryRawUnsafe<{ expired: unknown }[]>(
          'SELECT locked_until < UTC_TIMESTAMP(3) AS expired FROM idempotency_records WHERE scope = ? AND idempotency_key = ?',
          scope,
          'pay-1',
        );
        return Number(row?.expired) === 1;
      },
      10_000,
    );
    const b = await runIdempotent(
      {
        ...base,
        store: prismaStore(nodes[1]!),
        mode: 'lease',
        leaseMs: 10_000,
        onEvent: (e) => events.b!.push(e.type),
      },
      pay(nodes[1]!, 'B'),
    );
    expect(b).toMatchObject({ value: 'B', replayed: false });
    aRelease.open();
    // A completes on node 1: its owner token is no longer the record's, on every node.
    expect(await a).toBeInstanceOf(IdempotencyLeaseLostError);
    expect(events.b).toContain('expired_takeover');
    expect(events.a).toContain('fenced');
    // Every node replays B's answer.
    for (const node of nodes) {
      const replay = await runIdempotent(
        { ...base, store: prismaStore(node), mode: 'lease' },
        pay(node, 'C'),
      );
      expect(replay).toMatchObject({ value: 'B', replayed: true });
    }
    // A lease fences the stored answer, not the effects: both owners paid (see README "Lease mode").
    expect(await payments(scope)).toBe(2);
  }, 60_000);
});
