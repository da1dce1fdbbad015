import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { runIdempotent } from '../../src/index.js';
import { prismaStore } from '../../src/prisma/index.js';
import { connect, databases } from '../helpers/databases.js';
import { type IsolatedDatabase, isolatedDatabase } from '../helpers/isolated-database.js';

/**
 * Prisma's default MySQL DDL gives text columns `utf8mb4_unicode_ci`, which compares "Bob" and
 * "bob" (and "é" and "e") as equal. A table made that way must still never hand one caller's
 * record to another.
 */
// SQLite and PostgreSQL compare text byte for byte unless told otherwise.
const db = databases.find((database) => database.provider === 'mysql')!;

(db.url ? describe : describe.skip)(
  'key and scope columns that compare case-insensitively on MariaDB',
  () => {
    let isolated: IsolatedDatabase;
    let prisma: Awaited<ReturnType<typeof connect>>;
    beforeAll(async () => {
      isolated = await isolatedDatabase(db);
      prisma = await connect(isolated.db);
      await prisma.$executeRawUnsafe(
        'ALTER TABLE idempotency_records MODIFY scope VARCHAR(255) COLLATE utf8mb4_unicode_ci NOT NULL, MODIFY idempotency_key VARCHAR(255) COLLATE utf8mb4_unicode_ci NOT NULL',
      );
    });
    afterAll(async () => {
      await prisma?.$disconnect();
      await isolated?.drop();
    });

    const run = (
      scope: string,
      key: string,
      resolver: () => Promise<string>,
      mode: 'transactional' | 'lease',
    ) =>
      runIdempotent(
        { store: prismaStore(prisma), scope, key, operation: 'payments.create', input: { amount: 1 }, mode },
        resolver,
      );

    it.each(['transactional', 'lease'] as const)(
      'never replays Bob’s record to bob, nor bob’s key to BOB (%s)',
      async (mode) => {
        const first = vi.fn(async () => `Bob's result`);
        await expect(run(`Bob-${mode}`, 'k-1', first, mode)).resolves.toMatchObject({ replayed: false });
        const other = vi.fn(async () => `bob's result`);
        const byScope = await run(`bob-${mode}`, 'k-1', other, mode).catch((error: unknown) => error);
        expect(byScope).not.toMatchObject({ value: `Bob's result` });
        expect(byScope).toBeInstanceOf(Error);
        const byKey = await run(`Bob-${mode}`, 'K-1', other, mode).catch((error: unknown) => error);
        expect(byKey).not.toMatchObject({ value: `Bob's result` });
        expect(byKey).toBeInstanceOf(Error);
        expect(other).not.toHaveBeenCalled();
        expect(first).toHaveBeenCalledTimes(1);
      },
    );
  },
);
