import { afterAll, beforeAll, expect, it } from 'vitest';
import { IdempotencyKeyInvalidError, runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, describeEachDatabase, uniqueScope } from '../helpers/databases.js';

describeEachDatabase('scopes that differ only by trailing spaces', (db) => {
  let prisma: Awaited<ReturnType<typeof connect>>;
  let store: ReturnType<typeof prismaStore<typeof prisma>>;
  beforeAll(async () => {
    prisma = await connect(db);
    store = prismaStore(prisma);
  });
  afterAll(() => prisma?.$disconnect());

  it('never lets two scopes that differ only by a trailing space share records', async () => {
    const alice = uniqueScope('name');
    const other = `${alice} `; // another principal whose id ends with a space
    const run = (scope: string) =>
      runIdempotent(
        { store, scope, key: 'k-1', operation: 'profile.update', input: { bio: 'hi' } },
        async () => ({ owner: scope }),
      );
    const first = await run(alice);
    expect(first.replayed).toBe(false);
    if (db.provider === 'mysql') {
      // utf8mb4_bin ignores trailing spaces: such a scope is refused rather than given alice's row.
      await expect(run(other)).rejects.toBeInstanceOf(IdempotencyKeyInvalidError);
      return;
    }
    const second = await run(other);
    expect(second.replayed).toBe(false);
    expect(second.value).toEqual({ owner: other });
  });
});
