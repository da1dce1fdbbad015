import { describe, expect, it } from 'vitest';
import { runStorm } from '../../bench/storm/storm.js';
import { PrismaClient } from '../../generated/mysql/client.js';
import { runIdempotent } from '../../src/index.js';
import { adapterForUrl, prismaStore } from '../../src/prisma/index.js';
import { uniqueScope } from '../helpers/databases.js';
import { gate } from '../helpers/gate.js';
import { until } from '../helpers/private-server.js';
import { countRecords } from '../helpers/records.js';

/**
 * The exactly-once storm (bench/storm) ends with failures, never hangs, when a request goes
 * unanswered: a storm on Galera once hung until its test timed out, and said nothing. On one
 * MariaDB node.
 */
const url = process.env.TEST_MYSQL_URL;

(url ? describe : describe.skip)('the storm, for a request left unanswered', () => {
  it('fails one that takes too long (here 1 ms), with the calls in flight and the record on each node', async () => {
    const report = await runStorm({
      urls: [url!],
      mode: 'lease',
      processes: 2,
      keys: 1,
      duplicates: 1,
      answerTimeoutMs: 1,
    });
    expect(report.failed).toBe(1);
    const [failure] = report.failures;
    expect(failure).toMatch(/^error: no final answer in 0\.001 s from server process 0 for key-0\n/);
    expect(failure).toMatch(/\n {2}process 0: \d+ calls in flight/);
    expect(failure).toMatch(/\n {2}process 1: 0 calls in flight/);
    expect(failure).toMatch(
      /\n {2}node 1: record (null|\{"status":"(IN_PROGRESS|COMPLETED)".*\}); running \[/,
    );
  }, 60_000);

  it('fails a request whose retries outlast the time it may take, with the last retryable answer', async () => {
    // key-0 is claimed first, under a lease that outlasts the test: the storm's servers answer
    // IDEMPOTENCY_KEY_IN_PROGRESS (retryable) after a wait of 50 ms, every time.
    const prisma = new PrismaClient({ adapter: (await adapterForUrl(url!)) as never });
    const scope = uniqueScope();
    const held = gate();
    const holder = runIdempotent(
      {
        store: prismaStore(prisma),
        scope,
        key: 'key-0',
        operation: 'payments.create',
        input: { amount: '5.00' },
        mode: 'lease',
        leaseMs: 60_000,
      },
      () => held.opened,
    );
    try {
      await until('key-0 is claimed', async () => (await countRecords(prisma, 'mysql', scope)) === 1, 10_000);
      const report = await runStorm({
        urls: [url!],
        mode: 'lease',
        processes: 1,
        keys: 1,
        duplicates: 1,
        scope,
        waitTimeoutMs: 50,
        answerTimeoutMs: 3_000,
      });
      expect(report.failed).toBe(1);
      expect(report.failures[0]).toMatch(
        /^error: no final answer in 3 s from server process 0 for key-0 \(after \d+ retryable answers, the last IDEMPOTENCY_KEY_IN_PROGRESS\)\n/,
      );
      expect(report.failures[0]).toMatch(/\n {2}node 1: record \{"status":"IN_PROGRESS","owned":1/);
    } finally {
      held.open();
      await holder;
      await prisma.$disconnect();
    }
  }, 60_000);

  it('fails the requests of a server process that died, and goes on with the others', async () => {
    let pids: number[] = [];
    const storm = runStorm({
      urls: [url!],
      mode: 'lease',
      processes: 2,
      keys: 400,
      duplicates: 2,
      onReady: (started) => {
        pids = started;
        process.kill(started[0]!, 'SIGKILL');
      },
    });
    const report = await storm;
    expect(pids).toHaveLength(2);
    // Every key had a duplicate on each process: each key's request to the dead one failed, the
    // other was answered by the live one.
    expect(report.failed).toBe(400);
    expect(report.failures[0]).toBe('error: server exited with SIGKILL');
    expect(report.effects).toEqual({ once: 400, none: 0, more: 0 });
  }, 60_000);
});
