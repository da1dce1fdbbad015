// The two libraries we compare against, each wrapping the same payment handler with its Redis store
// on the local Redis, configured as their documentation shows:
//
// - @aws-lambda-powertools/idempotency: `makeIdempotent` with `CachePersistenceLayer` over
//   @redis/client; the record key is `[userId, key]` of the payload (JMESPath). Without payload
//   validation: in 2.35.0 `CachePersistenceLayer` does not write the payload hash back with the
//   result, so with `payloadValidationJmesPath` set every replay fails with
//   IdempotencyValidationError. Its replays therefore check less than ours (no input mismatch).
// - @node-idempotency/core: `Idempotency` with `RedisStorageAdapter`, called the way its HTTP
//   integrations call it: `onRequest` before the handler, `onResponse` after.
//
// Both store the handler's result as JSON, so a replay returns the Decimal and the Date as strings;
// ours returns them as they were. Latency is compared as it is.
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { Idempotency } from '@node-idempotency/core';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import { createClient } from '@redis/client';

/** One idempotent call as the peers see it: who, which key, what. */
export interface PeerCall<Input> {
  userId: string;
  key: string;
  input: Input;
}

/** A handler wrapped by a peer library. */
export type PeerHandler<Input, Output> = (call: PeerCall<Input>) => Promise<Output>;

/** The peers, ready to wrap handlers, and how to let go of their Redis connections. */
export interface Peers {
  /** With `cached`, Powertools' own local cache (`useLocalCache`): compared with our `localCache`. */
  powertools<Input, Output>(
    handler: PeerHandler<Input, Output>,
    options?: { cached?: boolean },
  ): PeerHandler<Input, Output | unknown>;
  nodeIdempotency<Input, Output>(handler: PeerHandler<Input, Output>): PeerHandler<Input, Output | unknown>;
  close(): Promise<void>;
}

const DAY_MS = 86_400_000;

/** Connects both peers to `redisUrl`; every key they write starts with `prefix:`, and `close` deletes them. */
export async function connectPeers(redisUrl: string, prefix: string): Promise<Peers> {
  const redis = await createClient({ url: redisUrl }).connect();
  const storage = new RedisStorageAdapter({ url: redisUrl });
  await storage.connect();

  return {
    powertools(handler, { cached = false } = {}) {
      const config = new IdempotencyConfig({
        eventKeyJmesPath: '[userId, key]',
        throwOnNoIdempotencyKey: true,
        expiresAfterSeconds: DAY_MS / 1000,
        useLocalCache: cached,
        maxLocalCacheSize: 10_000,
      });
      // Outside Lambda there is no remaining time to read; without a context the library warns on
      // every call. This stands in for a Lambda with a 30 s timeout.
      config.registerLambdaContext({ getRemainingTimeInMillis: () => 30_000 } as never);
      return makeIdempotent(handler, {
        persistenceStore: new CachePersistenceLayer({ client: redis }),
        config,
        keyPrefix: `${prefix}:powertools${cached ? '-cached' : ''}`,
      });
    },

    nodeIdempotency(handler) {
      const idempotency = new Idempotency(storage, {
        cacheKeyPrefix: `${prefix}:node-idempotency`,
        cacheTTLMS: DAY_MS,
      });
      return async (call) => {
        const request = {
          headers: { 'idempotency-key': call.key },
          method: 'POST',
          path: `/createPayment/${call.userId}`,
          body: call.input as Record<string, unknown>,
        };
        const stored = await idempotency.onRequest(request);
        if (stored) return stored.body;
        try {
          const body = await handler(call);
          await idempotency.onResponse(request, { body });
          return body;
        } catch (error) {
          await idempotency.onResponse(request, { error });
          throw error;
        }
      };
    },

    async close() {
      // The records of this run go with it.
      for await (const keys of redis.scanIterator({ MATCH: `${prefix}:*`, COUNT: 1_000 })) {
        if (keys.length > 0) await redis.del(keys);
      }
      await Promise.all([redis.quit(), storage.disconnect()]);
    },
  };
}
