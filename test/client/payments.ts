import { Decimal } from '@prisma/client/runtime/client';
import { PrismaClient as PostgresClient } from '../../generated/postgresql/client.js';
import { adapterForUrl, prismaStore } from '../../src/prisma/index.js';
import type { connect } from '../helpers/databases.js';

type Prisma = Awaited<ReturnType<typeof connect>>;
type PaymentsStore = ReturnType<typeof prismaStore<Prisma>>;
type Tx = PaymentsStore['lease']['client'];

/** What `createPayment` answers. */
export interface PaymentResult {
  id: number;
  amount: string;
  currency: string;
  createdAt: Date;
}

/** The input of `createPayment`, without the key. */
export interface PaymentInput {
  amount: string;
  currency: string;
}

/**
 * What the test servers' `createPayment` does behind the library's middleware or plugin: write one
 * payment through the transaction client. Knobs let a test slow it down or take the store away.
 */
export function paymentsBackend(prisma: Prisma) {
  const live = prismaStore(prisma);
  const waiting: { count: number; resolve: () => void }[] = [];
  let down: Promise<{ client: PostgresClient; store: PaymentsStore }> | undefined;
  /** A real Prisma store whose database does not answer: nothing listens on port 1. */
  const unreachable = () => {
    down ??= adapterForUrl('postgresql://postgres@127.0.0.1:1/test').then((adapter) => {
      const client = new PostgresClient({ adapter: adapter as never });
      return { client, store: prismaStore(client) as unknown as PaymentsStore };
    });
    return down.then(({ store }) => store);
  };
  const current = async (): Promise<PaymentsStore> => (backend.storeUp ? live : await unreachable());

  const backend = {
    prisma,
    /** Resolver runs that got as far as writing a payment (whether or not they committed). */
    runs: 0,
    /** How long the resolver takes after writing, holding the key. */
    resolverDelayMs: 0,
    /** Unset: requests reach a store whose database is unreachable (503). */
    storeUp: true,
    /** The store to give the middleware or plugin: the live one, or the unreachable one. */
    store: {
      serializer: live.serializer,
      find: async (scope, key) => (await current()).find(scope, key),
      lease: live.lease,
      transaction: async (work) => (await current()).transaction!(work),
    } satisfies PaymentsStore as PaymentsStore,

    /**
     * Takes the store away (`storeUp = false`). Resolves once the unreachable store has failed a
     * read: its client is made on first use, which takes longer than `WAIT_TIMEOUT_MS`, and a first
     * attempt's claim transaction (the request's first contact with the store) would be answered
     * 409 rather than 503 while it waits for it.
     */
    async takeStoreDown() {
      backend.storeUp = false;
      await (await unreachable()).find('', '').catch(() => undefined);
    },

    /** Resolves once `count` resolver runs have written their payment. */
    whenRuns: (count: number) =>
      new Promise<void>((resolve) => {
        if (backend.runs >= count) resolve();
        else waiting.push({ count, resolve });
      }),

    /** The resolver: one payment, through the claim's transaction. */
    async writePayment(tx: Tx, scope: string, input: PaymentInput): Promise<PaymentResult> {
      const payment = await tx.payment.create({
        data: { userId: scope, amount: new Decimal(input.amount), currency: input.currency },
      });
      backend.runs++;
      for (const waiter of waiting.filter((w) => backend.runs >= w.count)) waiter.resolve();
      if (backend.resolverDelayMs > 0) await new Promise((r) => setTimeout(r, backend.resolverDelayMs));
      return {
        id: payment.id,
        amount: payment.amount.toString(),
        currency: payment.currency,
        createdAt: payment.createdAt,
      };
    },

    /** The payments of `scope`, oldest first. */
    paymentsOf: (scope: string) =>
      prisma.payment.findMany({ where: { userId: scope }, orderBy: { id: 'asc' } }),

    close: async () => {
      const { client } = (await down) ?? {};
      await client?.$disconnect().catch(() => undefined);
    },
  };
  return backend;
}

/** The principal of a request: the test servers take `Authorization: Bearer <user id>`. */
export function scopeOf(authorization: string | null | undefined): string {
  return (authorization ?? '').replace(/^Bearer /, '');
}

/** The backend's type, for the servers. */
export type PaymentsBackend = ReturnType<typeof paymentsBackend>;

/**
 * How long a duplicate waits for the request holding its key before the server answers 409. Short,
 * so the "server slow" tests see a 409; a 409 elsewhere is harmless, since the clients retry it.
 */
export const WAIT_TIMEOUT_MS = 300;
