import { Decimal } from '@prisma/client/runtime/client';
import { afterAll, describe, expect, it } from 'vitest';
import { PrismaClient } from '../../generated/postgresql/client.js';
import { runIdempotent } from '../../src/index.js';
import { adapterForUrl, prismaStore } from '../../src/prisma/index.js';
import { databases, uniqueScope } from '../helpers/databases.js';

// A resolver that sends a statement without awaiting it (a fire-and-forget audit write) which fails
// in the database: on PostgreSQL it aborts the transaction, and the COMMIT that follows is answered
// with the tag ROLLBACK, not an error. Sent at every point of the call's end (after 0 to 11 ticks),
// the call must never answer with a result that did not commit.

const postgres = databases.find((db) => db.provider === 'postgresql')!;

describe.runIf(postgres.url)('a resolver’s unawaited statement that fails, on PostgreSQL', () => {
  const clients: PrismaClient[] = [];
  afterAll(() => Promise.all(clients.map((client) => client.$disconnect())));

  it.each([true, false])(
    'never answers with a result that did not commit (directStatements: %s)',
    async (direct) => {
      const prisma = new PrismaClient({
        adapter: (await adapterForUrl(postgres.url!, { directStatements: direct })) as never,
      });
      clients.push(prisma);
      const store = prismaStore(prisma);
      const refusals: unknown[] = [];
      for (let ticks = 0; ticks < 12; ticks++) {
        const scope = uniqueScope();
        const outcome = await runIdempotent(
          { store, scope, key: 'k', operation: 'pay', input: {} },
          async (tx) => {
            const client = tx as unknown as PrismaClient;
            await client.payment.create({
              data: { userId: scope, amount: new Decimal('1'), currency: 'EUR' },
            });
            let later: Promise<unknown> = Promise.resolve();
            for (let i = 0; i < ticks; i++) later = later.then(() => undefined);
            void later.then(() => client.$executeRawUnsafe('SELECT 1/0').catch(() => undefined));
            return 'paid';
          },
        ).then(
          (result) => result.value,
          (error: unknown) => error,
        );
        const payments = await prisma.payment.count({ where: { userId: scope } });
        const record = await store.find(scope, 'k');
        if (outcome === 'paid') {
          expect({ ticks, payments, status: record?.status }).toEqual({
            ticks,
            payments: 1,
            status: 'COMPLETED',
          });
        } else {
          refusals.push(outcome);
          expect({ ticks, payments, record }).toEqual({ ticks, payments: 0, record: null });
          expect(outcome).not.toBeInstanceOf(TypeError);
          expect((outcome as Error).message).toMatch(/Nothing was committed/);
        }
      }
      // Past the client, the store's statements end the work before the stray one reaches it.
      if (!direct) expect(refusals.length).toBeGreaterThan(0);
    },
  );
});
