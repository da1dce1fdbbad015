import { retryLink, TRPCClientError, type TRPCLink } from '@trpc/client';
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
