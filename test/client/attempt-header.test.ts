import { createTRPCClient, type Operation, TRPCClientError, type TRPCLink } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { observable } from '@trpc/server/observable';
import { describe, expect, it } from 'vitest';
import { idempotencyHeaders, idempotencyLink } from '../../src/client/index.js';

const router = initTRPC.create().router({});
const fast = { baseDelayMs: 1, maxDelayMs: 2 };

/** A terminating link that loses each call's first `failures` sends, keeping every operation sent. */
function flakyLink(failures: number, sent: Operation[]): TRPCLink<typeof router> {
  const lost = new Map<string, number>();
  return () =>
    ({ op }) =>
      observable((observer) => {
        sent.push(op);
        const key = String(op.context.idempotencyKey);
        const count = lost.get(key) ?? 0;
        if (count < failures) {
          lost.set(key, count + 1);
          observer.error(TRPCClientError.from(new Error('socket hang up')));
        } else {
          observer.next({ result: { type: 'data', data: key } });
          observer.complete();
        }
      });
}

function clientOf(failures: number) {
  const sent: Operation[] = [];
  const client = createTRPCClient<typeof router>({
    links: [idempotencyLink({ retry: fast }), flakyLink(failures, sent)],
  });
  // biome-ignore lint/suspicious/noExplicitAny: the router has no procedures; the link sees the path only.
  return { pay: (input: unknown, opts?: object) => (client as any).pay.mutate(input, opts), sent };
}

describe('idempotencyHeaders and Idempotency-Attempt', () => {
  it('writes, for an httpLink, the key and which send of it this is: 1, then 2, 3…', async () => {
    const { pay, sent } = clientOf(2);
    await pay({ amount: 1 });
    const headers = sent.map((op) => idempotencyHeaders({ op }));
    const key = headers[0]!['Idempotency-Key'];
    expect(headers).toEqual([
      { 'Idempotency-Key': key, 'Idempotency-Attempt': '1' },
      { 'Idempotency-Key': key, 'Idempotency-Attempt': '2' },
      { 'Idempotency-Key': key, 'Idempotency-Attempt': '3' },
    ]);
  });

  it("numbers no send of a caller's key, which may have been sent before", async () => {
    const { pay, sent } = clientOf(1);
    await pay({ amount: 1 }, { context: { idempotencyKey: 'order-42' } });
    await pay({ amount: 1, idempotencyKey: 'order-43' });
    expect(sent.map((op) => idempotencyHeaders({ op }))).toEqual([
      { 'Idempotency-Key': 'order-42' },
      { 'Idempotency-Key': 'order-42' },
      { 'Idempotency-Key': 'order-43' },
      { 'Idempotency-Key': 'order-43' },
    ]);
  });

  it('writes, for a batch, no key and the highest attempt among its calls', async () => {
    const { pay, sent } = clientOf(1);
    await Promise.all([pay({ amount: 1 }), pay({ amount: 2 })]);
    const [firstA, firstB, retryA] = sent;
    expect(idempotencyHeaders({ opList: [firstA!, firstB!] })).toEqual({ 'Idempotency-Attempt': '1' });
    expect(idempotencyHeaders({ opList: [firstB!, retryA!] })).toEqual({ 'Idempotency-Attempt': '2' });
  });

  it('leaves the queries of a batch out of its attempt', async () => {
    const { pay, sent } = clientOf(0);
    await pay({ amount: 1 });
    const query = { type: 'query', context: {} } as const;
    expect(idempotencyHeaders({ opList: [query, sent[0]!] })).toEqual({ 'Idempotency-Attempt': '1' });
    expect(idempotencyHeaders({ opList: [query] })).toEqual({});
  });

  it('writes nothing for a batch holding a call whose sends are not counted', async () => {
    const { pay, sent } = clientOf(0);
    await pay({ amount: 1 });
    await pay({ amount: 1 }, { context: { idempotencyKey: 'order-42' } });
    expect(idempotencyHeaders({ opList: sent })).toEqual({});
    expect(idempotencyHeaders({ opList: [{ context: {} }] })).toEqual({});
  });
});
