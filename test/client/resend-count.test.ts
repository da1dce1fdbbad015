import { SpanKind, trace } from '@opentelemetry/api';
import { createTRPCClient, retryLink, TRPCClientError, type TRPCLink } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { observable } from '@trpc/server/observable';
import { describe, expect, it } from 'vitest';
import { idempotencyLink, idempotentFetch } from '../../src/client/index.js';
import { telemetryHarness } from '../helpers/telemetry.js';

const { tracer, span } = telemetryHarness();
const fast = { baseDelayMs: 1, maxDelayMs: 2 };

const router = initTRPC.create().router({});

/** A terminating link that loses the first `failures` attempts, then answers. */
function flakyLink(failures: number): TRPCLink<typeof router> {
  return () =>
    ({ op }) =>
      observable((observer) => {
        if (failures-- > 0) observer.error(TRPCClientError.from(new Error('socket hang up')));
        else {
          observer.next({ result: { type: 'data', data: op.context.idempotencyKey } });
          observer.complete();
        }
      });
}

describe('http.request.resend_count', () => {
  it('is set by idempotencyLink on the active span when it resends a mutation', async () => {
    const client = createTRPCClient<typeof router>({
      links: [idempotencyLink({ retry: fast, trace }), flakyLink(2)],
    });
    await tracer.startActiveSpan('POST pay', { kind: SpanKind.CLIENT }, async (clientSpan) => {
      // biome-ignore lint/suspicious/noExplicitAny: the router has no procedures; the link sees the path only.
      await (client as any).pay.mutate({ amount: 1 });
      clientSpan.end();
    });
    expect(span('POST pay').attributes['http.request.resend_count']).toBe(2);
  });

  it("is set by idempotencyLink on the resends of tRPC's retryLink, placed before it", async () => {
    const client = createTRPCClient<typeof router>({
      links: [
        retryLink({ retry: ({ attempts }) => attempts < 3 }),
        idempotencyLink({ retry: { attempts: 1 }, trace }),
        flakyLink(2),
      ],
    });
    await tracer.startActiveSpan(
      'POST pay, retried by retryLink',
      { kind: SpanKind.CLIENT },
      async (clientSpan) => {
        // biome-ignore lint/suspicious/noExplicitAny: the router has no procedures; the link sees the path only.
        await (client as any).pay.mutate({ amount: 1 });
        clientSpan.end();
      },
    );
    expect(span('POST pay, retried by retryLink').attributes['http.request.resend_count']).toBe(2);
  });

  it('is set by idempotentFetch on the active span when it resends a mutation', async () => {
    let calls = 0;
    const fetch = idempotentFetch(
      async () => {
        if (calls++ === 0) throw new TypeError('fetch failed');
        return new Response('{"data":{"pay":1}}', { status: 200 });
      },
      { retry: fast, trace },
    );
    await tracer.startActiveSpan('POST /graphql', { kind: SpanKind.CLIENT }, async (clientSpan) => {
      await fetch('http://localhost/graphql', {
        method: 'POST',
        body: JSON.stringify({ query: 'mutation { pay }' }),
      });
      clientSpan.end();
    });
    expect(calls).toBe(2);
    expect(span('POST /graphql').attributes['http.request.resend_count']).toBe(1);
  });

  it('is not set on a request sent once', async () => {
    const fetch = idempotentFetch(async () => new Response('{"data":{"pay":1}}'), { trace });
    await tracer.startActiveSpan('POST once', async (clientSpan) => {
      await fetch('http://localhost/graphql', { method: 'POST', body: '{"query":"mutation { pay }"}' });
      clientSpan.end();
    });
    expect(span('POST once').attributes).not.toHaveProperty('http.request.resend_count');
  });
});
