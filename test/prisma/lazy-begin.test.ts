import net from 'node:net';
import { PrismaPg } from '@prisma/adapter-pg';
import { Decimal } from '@prisma/client/runtime/client';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { PrismaClient } from '../../generated/postgresql/client.js';
import { runIdempotent } from '../../src/index.js';
import { adapterForUrl, directStatements, lazyBegin, prismaStore } from '../../src/prisma/index.js';
import { uniqueScope } from '../helpers/databases.js';

/** A stand-in for `pg.Client` whose answers the test settles by hand. */
class ScriptedClient {
  readonly pipeline: boolean;
  readonly sent: string[] = [];
  readonly answers = new Map<string, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  constructor(config: { pipeline?: boolean }) {
    this.pipeline = config.pipeline ?? false;
  }
  query(config: string | { text: string }, callback?: unknown): unknown {
    const text = typeof config === 'string' ? config : config.text;
    this.sent.push(text);
    if (typeof callback === 'function') return undefined;
    return new Promise((resolve, reject) => this.answers.set(text, { resolve, reject }));
  }
}

describe('lazyBegin', () => {
  const Client = lazyBegin(ScriptedClient);

  it('answers BEGIN at once and writes the next statement behind it', async () => {
    const client = new Client({ pipeline: true });
    const begun = await client.query({ text: 'BEGIN' });
    expect(begun).toMatchObject({ command: 'BEGIN', rows: [] });
    const next = client.query({ text: 'INSERT 1' });
    expect(client.sent).toEqual(['BEGIN', 'INSERT 1']);
    client.answers.get('BEGIN')!.resolve({ command: 'BEGIN' });
    client.answers.get('INSERT 1')!.resolve({ command: 'INSERT', rowCount: 1 });
    await expect(next).resolves.toEqual({ command: 'INSERT', rowCount: 1 });
  });

  it("gives BEGIN's failure to the statement after it", async () => {
    const client = new Client({ pipeline: true });
    await client.query('BEGIN');
    const next = client.query({ text: 'INSERT 1' });
    client.answers.get('BEGIN')!.reject(new Error('Connection terminated'));
    client.answers.get('INSERT 1')!.reject(new Error('Connection terminated (the insert)'));
    await expect(next).rejects.toThrow(/^Connection terminated$/);
    // The statement after that is the connection's own again.
    const later = client.query({ text: 'ROLLBACK' });
    client.answers.get('ROLLBACK')!.resolve({ command: 'ROLLBACK' });
    await expect(later).resolves.toEqual({ command: 'ROLLBACK' });
  });

  it('waits for BEGIN as pg.Client does when the connection does not pipeline', async () => {
    const client = new Client({ pipeline: false });
    const begun = client.query({ text: 'BEGIN' });
    expect(client.sent).toEqual(['BEGIN']);
    client.answers.get('BEGIN')!.resolve({ command: 'BEGIN', fromServer: true });
    await expect(begun).resolves.toEqual({ command: 'BEGIN', fromServer: true });
  });

  it("holds a tick's statements back, to go out in one write when the tick ends", async () => {
    class WithSocket extends ScriptedClient {
      readonly connection = {
        stream: { cork: () => this.sent.push('(cork)'), uncork: () => this.sent.push('(uncork)') },
      };
    }
    const client = new (lazyBegin(WithSocket))({ pipeline: true });
    void client.query('UPDATE 1');
    void client.query('COMMIT');
    expect(client.sent).toEqual(['(cork)', 'UPDATE 1', 'COMMIT']);
    await new Promise((resolve) => process.nextTick(resolve));
    void client.query('SELECT 1');
    expect(client.sent).toEqual(['(cork)', 'UPDATE 1', 'COMMIT', '(uncork)', '(cork)', 'SELECT 1']);
  });

  it('leaves callback-style queries to pg', () => {
    const client = new Client({ pipeline: true });
    expect(client.query('BEGIN', () => undefined)).toBeUndefined();
    expect(client.sent).toEqual(['BEGIN']);
  });
});

const url = process.env.TEST_POSTGRES_URL;

/** How many writes every socket of the process made while `run` ran (one per system call). */
async function socketWrites(run: () => Promise<unknown>): Promise<number> {
  const socket = net.Socket.prototype as unknown as Record<
    '_write' | '_writev',
    (...args: unknown[]) => unknown
  >;
  const { _write, _writev } = socket;
  let count = 0;
  const counted = (write: (...args: unknown[]) => unknown) =>
    function (this: unknown, ...args: unknown[]) {
      count++;
      return write.apply(this, args);
    };
  Object.assign(socket, { _write: counted(_write), _writev: counted(_writev) });
  try {
    await run();
  } finally {
    Object.assign(socket, { _write, _writev });
  }
  return count;
}

(url ? describe : describe.skip)('lazyBegin on PostgreSQL', () => {
  /** Below `lazyBegin`: what reaches the server, and when its answers come back. */
  const events: string[] = [];
  class Recording extends pg.Client {
    // biome-ignore lint/suspicious/noExplicitAny: pg's query is overloaded; this records every form.
    override query(...args: any[]): any {
      const text: string = typeof args[0] === 'string' ? args[0] : args[0].text;
      const verb = text.trim().split(/\s+/, 1)[0]!.toUpperCase();
      events.push(`send ${verb}`);
      const answered = (super.query as (...a: unknown[]) => unknown)(...args);
      if (answered instanceof Promise) {
        answered.then(
          () => events.push(`answer ${verb}`),
          () => events.push(`fail ${verb}`),
        );
      }
      return answered;
    }
  }
  const pool = new pg.Pool({
    connectionString: url,
    max: 2,
    pipeline: true,
    Client: lazyBegin(Recording),
  } as never);
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  // The store's own statements straight to the driver adapter's transaction, on the same pool.
  const direct = new PrismaClient({ adapter: directStatements(new PrismaPg(pool)) });
  afterAll(async () => {
    await direct.$disconnect();
    await prisma.$disconnect();
  });

  const pay = (userId: string) => (tx: unknown) =>
    (tx as PrismaClient).payment.create({
      data: { userId, amount: new Decimal('9.99'), currency: 'EUR' },
      select: { id: true },
    });

  it("sends a fresh key's claim before BEGIN's answer, and replays what it stored", async () => {
    const scope = uniqueScope();
    const store = prismaStore(prisma);
    await prisma.$queryRawUnsafe('SELECT 1');
    events.length = 0;
    const first = await runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, pay(scope));
    const begin = events.indexOf('send BEGIN');
    expect(events.slice(begin, begin + 3)).toEqual(['send BEGIN', 'send INSERT', 'answer BEGIN']);
    const again = await runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, pay(scope));
    expect(again).toMatchObject({ replayed: true, value: first.value });
    expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
  });

  it("sends a fresh key's result with COMMIT where the store's statements skip the client: three round trips", async () => {
    const scope = uniqueScope();
    const store = prismaStore(direct);
    await direct.$queryRawUnsafe('SELECT 1');
    events.length = 0;
    const writes = await socketWrites(() =>
      runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {}, firstAttempt: true }, pay(scope)),
    );
    expect(events).toEqual([
      ...['send BEGIN', 'send INSERT', 'answer BEGIN', 'answer INSERT'], // the claim
      ...['send INSERT', 'answer INSERT'], // the payment
      ...['send WITH', 'send COMMIT', 'answer WITH', 'answer COMMIT'], // the result
    ]);
    // Each round trip's statements went out in one write.
    expect(writes).toBe(3);
    expect(await store.find(scope, 'k')).toMatchObject({ status: 'COMPLETED' });
  });

  it('sends the savepoint of a call with replayErrors in the resolver’s round trip', async () => {
    const scope = uniqueScope();
    const store = prismaStore(direct);
    await direct.$queryRawUnsafe('SELECT 1');
    events.length = 0;
    const declined = new Error('card declined');
    const options = { store, scope, operation: 'pay', input: {}, firstAttempt: true };
    await runIdempotent({ ...options, key: 'paid', replayErrors: (e) => e === declined }, pay(scope));
    expect(events).toEqual([
      ...['send BEGIN', 'send INSERT', 'answer BEGIN', 'answer INSERT'], // the claim
      ...['send SAVEPOINT', 'send INSERT', 'answer SAVEPOINT', 'answer INSERT'], // the payment
      ...['send WITH', 'send COMMIT', 'answer WITH', 'answer COMMIT'], // the result
    ]);
    events.length = 0;
    const declining = runIdempotent(
      { ...options, key: 'declined', replayErrors: (e) => e === declined },
      async (tx) => {
        await pay(scope)(tx);
        throw declined;
      },
    );
    await expect(declining).rejects.toBe(declined);
    expect(events.slice(4)).toEqual([
      ...['send SAVEPOINT', 'send INSERT', 'answer SAVEPOINT', 'answer INSERT'], // the payment
      ...['send ROLLBACK', 'answer ROLLBACK'], // back to the claim
      ...['send WITH', 'send COMMIT', 'answer WITH', 'answer COMMIT'], // the error
    ]);
    expect(await prisma.payment.count({ where: { userId: scope } })).toBe(1);
    expect(await store.find(scope, 'declined')).toMatchObject({ status: 'COMPLETED', resultIsError: true });
  });

  it('rolls back the claim and the effects together when the resolver fails', async () => {
    const scope = uniqueScope();
    const store = prismaStore(prisma);
    const failing = runIdempotent({ store, scope, key: 'k', operation: 'pay', input: {} }, async (tx) => {
      await pay(scope)(tx);
      throw new Error('card declined');
    });
    await expect(failing).rejects.toThrow('card declined');
    expect(await prisma.payment.count({ where: { userId: scope } })).toBe(0);
    expect(await store.find(scope, 'k')).toBeNull();
  });

  it('ends a transaction that ran nothing', async () => {
    await expect(prisma.$transaction(async () => 'nothing')).resolves.toBe('nothing');
    await expect(prisma.$queryRawUnsafe<{ one: number }[]>('SELECT 1 AS one')).resolves.toEqual([{ one: 1 }]);
  });
});

(url ? describe : describe.skip)("lazyBegin's connections on PostgreSQL", () => {
  /** A connection as the pool hands it out. */
  interface Connection {
    query(text: string): Promise<{ rows: { pid: number }[] }>;
    once(event: 'end', listener: () => void): unknown;
    release(error?: boolean): void;
  }
  const pools: [string, () => Promise<{ connect(): Promise<Connection>; end(): Promise<void> }>][] = [
    [
      "the README's pool",
      async () =>
        new pg.Pool({ connectionString: url, pipeline: true, Client: lazyBegin(pg.Client) } as never),
    ],
    [
      "adapterForUrl's pool",
      async () => {
        const adapter = (await (await adapterForUrl(url!)).connect()) as {
          underlyingDriver(): { connect(): Promise<Connection> };
          dispose(): Promise<void>;
        };
        return { connect: () => adapter.underlyingDriver().connect(), end: () => adapter.dispose() };
      },
    ],
  ];

  it.each(pools)(
    '%s survives a connection that breaks while checked out and idle, and its next query reports it',
    async (_, open) => {
      // The window between the pool handing a connection out and its user listening for its errors: a
      // connection the server ended then emitted an 'error' nobody heard, which ended the process.
      const pool = await open();
      const uncaught: unknown[] = [];
      const onUncaught = (error: unknown) => uncaught.push(error);
      process.on('uncaughtException', onUncaught);
      try {
        const connection = await pool.connect();
        const [{ pid } = { pid: 0 }] = (await connection.query('SELECT pg_backend_pid() AS pid')).rows;
        const ended = new Promise((resolve) => connection.once('end', () => resolve(undefined)));
        const killer = await pool.connect();
        await killer.query(`SELECT pg_terminate_backend(${pid})`);
        killer.release();
        await ended;
        expect(uncaught).toEqual([]);
        await expect(connection.query('SELECT 1')).rejects.toThrow(/not queryable/);
        connection.release(true);
        const next = await pool.connect();
        expect((await next.query('SELECT 1 AS pid')).rows).toEqual([{ pid: 1 }]);
        next.release();
      } finally {
        process.off('uncaughtException', onUncaught);
        await pool.end();
      }
    },
  );
});
