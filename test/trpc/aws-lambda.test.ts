import { initTRPC } from '@trpc/server';
import {
  awsLambdaRequestHandler,
  type CreateAWSLambdaContextOptions,
} from '@trpc/server/adapters/aws-lambda';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { memoryStore } from '../../src/index.js';
import { idempotency, idempotencyErrorFormatter } from '../../src/trpc/index.js';
import { gate } from '../helpers/gate.js';

// The Lambda adapter's context has no response to set headers on: the README's way is a `Headers`
// of the context's own, handed to tRPC by `responseMeta`.
type Event = CreateAWSLambdaContextOptions<never>['event'];
const createContext = ({ event, info }: CreateAWSLambdaContextOptions<Event>) => ({
  headers: (event as { headers: Record<string, string> }).headers,
  resHeaders: new Headers(),
  info,
  user: 'alice',
});
const t = initTRPC.context<typeof createContext>().create({ errorFormatter: idempotencyErrorFormatter });

function handler(resolver: () => Promise<number>) {
  const router = t.router({
    pay: t.procedure
      .input(z.object({ amount: z.number() }))
      .use(idempotency({ store: memoryStore(), scope: ({ ctx }) => ctx.user, waitTimeoutMs: 50 }))
      .mutation(resolver),
  });
  const handle = awsLambdaRequestHandler({
    router,
    createContext,
    responseMeta: ({ ctx }) => ({ headers: ctx?.resHeaders }),
  });
  /** An API Gateway HTTP API (payload 2.0) event for `POST /pay`. */
  return async (key: string) => {
    const event = {
      version: '2.0',
      routeKey: 'POST /pay',
      rawPath: '/pay',
      rawQueryString: '',
      // API Gateway keeps the client's spelling of a header.
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
      requestContext: { domainName: 'api.example.com', http: { method: 'POST', path: '/pay' } },
      body: JSON.stringify({ amount: 1 }),
      isBase64Encoded: false,
    };
    const result = (await handle(event as never, {} as never)) as {
      statusCode: number;
      headers: Record<string, string>;
      body: string;
    };
    return { status: result.statusCode, headers: result.headers, body: JSON.parse(result.body) as unknown };
  };
}

describe('idempotency() under tRPC’s AWS Lambda adapter, headers through responseMeta', () => {
  it('replays a retry and marks it with Idempotent-Replayed', async () => {
    let runs = 0;
    const pay = handler(async () => ++runs);
    const first = await pay('k-1');
    const retry = await pay('k-1');
    expect([first.status, retry.status, runs]).toEqual([200, 200, 1]);
    expect(retry.body).toEqual(first.body);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(retry.headers['idempotent-replayed']).toBe('true');
  });

  it('answers a duplicate of a running call 409 with Retry-After', async () => {
    const { opened, open } = gate();
    const pay = handler(async () => {
      await opened;
      return 1;
    });
    const first = pay('k-2');
    const duplicate = await pay('k-2');
    open();
    expect((await first).status).toBe(200);
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers['retry-after']).toBe('1');
  });
});
