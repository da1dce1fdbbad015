import { memoryStore } from 'idempotent-mutations';
import { useIdempotency } from 'idempotent-mutations/envelop';

/** Mutations with an Idempotency-Key header run once per key; memoryStore keeps records in this process. */
export const idempotencyPlugin = useIdempotency({ store: memoryStore(), scope: () => 'demo-user' });
