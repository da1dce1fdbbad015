import { type IdempotencyEvent, runIdempotent } from 'idempotent-mutations';
import { prismaStore } from 'idempotent-mutations/prisma';
import type { PrismaClient } from '../../../generated/sqlite/client.js';

/** A payment gateway: an effect no database transaction can roll back. */
export interface Gateway {
  charge(request: { amount: string; currency: string; reference: string }): Promise<{ chargeId: string }>;
}

/** The gateway's answer for a declined card: an outcome to replay, not a failure to retry. */
export class CardDeclinedError extends Error {
  override name = 'CardDeclinedError';
  readonly code = 'CARD_DECLINED';
}

export function chargeCard(
  prisma: PrismaClient,
  gateway: Gateway,
  onEvent: (event: IdempotencyEvent) => void,
) {
  const store = prismaStore(prisma);
  return (userId: string, key: string, input: { amount: string; currency: string }) =>
    runIdempotent(
      {
        store,
        mode: 'lease', // the claim commits first; the result is stored after the charge
        leaseMs: 60_000, // a duplicate within it gets 409; after it, a retry may take the key over
        heartbeatMs: 20_000, // extends the lease while the charge runs
        scope: userId,
        key,
        operation: 'payments.charge',
        input,
        replayErrors: (error) => (error as { code?: string }).code === 'CARD_DECLINED',
        onEvent, // claimed, replayed, in_progress, completed, released, fenced, …
      },
      async (tx) => {
        // The gateway's own idempotency key: even a takeover after a lost lease cannot charge twice.
        const { chargeId } = await gateway.charge({ ...input, reference: `${userId}:${key}` });
        // In lease mode `tx` is the plain client: this write commits on its own.
        await tx.payment.create({ data: { userId, amount: input.amount, currency: input.currency } });
        return { chargeId };
      },
    );
}
