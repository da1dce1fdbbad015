import { type Operation, retryLink, TRPCClientError, type TRPCLink } from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';
import { observable } from '@trpc/server/observable';
import { expect, it } from 'vitest';
import { idempotencyLink } from '../../src/client/index.js';
import { clientOf } from './link-client.js';

it('keeps the key of a call still waiting for its answer, however many calls run beside it', async () => {
  const keys = new Map<number, string[]>();
  const waiting: { fail: () => void; answer: () => void }[] = [];
  // Holds each call's first send until told; a second send is answered at once.
  const terminating: TRPCLink<AnyTRPCRouter> =
    () =>
    ({ op }) =>
      observable((observer) => {
        const sent = [...(keys.get(op.id) ?? []), (op.input as { idempotencyKey: string }).idempotencyKey];
        keys.set(op.id, sent);
        const answer = () => {
          observer.next({ result: { type: 'data', data: 'ok' } });
          observer.complete();
        };
        if (sent.length > 1) return answer();
        waiting.push({
          fail: () => observer.error(TRPCClientError.from(new TypeError('fetch failed'))),
          answer,
        });
      });
  const client = clientOf({
    links: [
      retryLink({ retry: ({ attempts }) => attempts < 2 }),
      idempotencyLink({ retry: { attempts: 1 } }),
      terminating,
    ],
  });
  // A bulk job: 1,001 payments in flight on one client, past the 1,000 failed calls it remembers.
  const calls = Array.from({ length: 1_001 }, (_, n) => client.pay.mutate({ n }));
  await new Promise((resolve) => setTimeout(resolve, 10));
  const [first, ...others] = waiting;
  first!.fail(); // its answer is lost: retryLink sends it again
  for (const other of others) other.answer();
  await Promise.all(calls);
  const [firstKey, resentKey] = [...keys.values()][0]!;
  expect(resentKey).toBe(firstKey);
});

it('forgets a call retryLink sent again once it failed for good, past the 1,000 failed calls it remembers', async () => {
  const sent: string[] = [];
  const firstCall: {
    op?: Operation;
    next?: (op: Operation) => ReturnType<ReturnType<TRPCLink<AnyTRPCRouter>>>;
  } = {};
  // Between retryLink and idempotencyLink: keeps the first call, to send it again at the end.
  const keeping: TRPCLink<AnyTRPCRouter> =
    () =>
    ({ op, next }) => {
      if (firstCall.op === undefined) Object.assign(firstCall, { op, next });
      return next(op);
    };
  // Fails every send at once: retryLink sends the call again from inside the error.
  const failing: TRPCLink<AnyTRPCRouter> =
    () =>
    ({ op }) =>
      observable((observer) => {
        sent.push((op.input as { idempotencyKey: string }).idempotencyKey);
        observer.error(TRPCClientError.from(new Error('refused')));
      });
  const client = clientOf({
    links: [
      retryLink({ retry: ({ attempts }) => attempts < 2 }),
      keeping,
      idempotencyLink({ retry: { attempts: 1 } }),
      failing,
    ],
  });
  for (let n = 0; n <= 1_001; n++) await client.pay.mutate({ n }).catch(() => undefined);
  const [firstKey, resentKey] = sent;
  expect(resentKey).toBe(firstKey); // retryLink's send of the same call
  // A later send of the first call, long forgotten: a new logical mutation, with a new key.
  await new Promise<void>((resolve) =>
    firstCall.next!(firstCall.op!).subscribe({ error: () => resolve(), complete: () => resolve() }),
  );
  expect(sent.at(-1)).not.toBe(firstKey);
});
