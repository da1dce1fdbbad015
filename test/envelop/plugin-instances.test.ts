import { type ExecutionResult, execute, parse } from 'graphql';
import { describe, expect, it } from 'vitest';
import { useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';
import { paymentsSchema, yogaFor } from './payments-yoga.js';

describe('useIdempotency instances', () => {
  it('two plugins over one schema object each keep records in their own store and scope', async () => {
    const { schema, calls } = paymentsSchema();
    const [storeA, storeB] = [memoryStore(), memoryStore()];
    const a = yogaFor(schema, { store: storeA, scope: () => 'tenant-a' });
    const b = yogaFor(schema, { store: storeB, scope: () => 'tenant-b' });
    for (const server of [a, b]) {
      await server.send('mutation { pay(amount: 1, idempotencyKey: "k") }');
      const retry = await server.send('mutation { pay(amount: 1, idempotencyKey: "k") }');
      expect(retry.body.extensions?.idempotency).toMatchObject({ pay: { key: 'k', replayed: true } });
    }
    await b.send('mutation { pay(amount: 2) }', 'op');

    expect(calls.pay).toBe(3);
    expect(await storeA.find('tenant-a', 'k')).toMatchObject({ status: 'COMPLETED' });
    expect(await storeB.find('tenant-b', 'k')).toMatchObject({ status: 'COMPLETED' });
    expect(await storeB.find('tenant-b', 'op')).toMatchObject({ status: 'COMPLETED' });
    expect(await storeA.find('tenant-b', 'k')).toBeNull();
    expect(await storeB.find('tenant-a', 'k')).toBeNull();
  });

  it("leaves the user's schema as it was: its resolvers run unwrapped outside the plugin", async () => {
    const { schema, calls } = paymentsSchema();
    const { resolve } = schema.getMutationType()!.getFields().pay!;
    const { send } = yogaFor(schema);
    await send('mutation { pay(amount: 1, idempotencyKey: "k") }');
    const plain = (await execute({
      schema,
      document: parse('mutation { pay(amount: 3) }'),
    })) as ExecutionResult;

    expect(schema.getMutationType()!.getFields().pay!.resolve).toBe(resolve);
    expect(plain).toEqual({ data: { pay: 3 } });
    expect(calls.pay).toBe(2);
  });

  it('refuses a second useIdempotency in one server at startup', () => {
    const { schema } = paymentsSchema();
    const second = useIdempotency({ store: memoryStore(), scope: () => 'user-1' });
    expect(() => yogaFor(schema, {}, { after: [second] })).toThrow(
      'useIdempotency: this server has more than one useIdempotency plugin',
    );
  });
});
