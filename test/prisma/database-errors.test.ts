import { PrismaClientKnownRequestError } from '@prisma/client/runtime/client';
import { DriverAdapterError } from '@prisma/driver-adapter-utils';
import { describe, expect, it } from 'vitest';
import {
  IdempotencyKeyInProgressError,
  IdempotencyOutcomeUnknownError,
  IdempotencyStoreUnavailableError,
  IdempotencyTransactionExpiredError,
} from '../../src/core/errors.js';
import {
  asStoreError,
  classify,
  type DatabaseFailure,
  isDatabaseError,
  isTimeout,
  retryingTransaction,
  STATEMENT_CONFLICT_RETRIES,
  standalone,
} from '../../src/prisma/database-errors.js';

// The shapes below are the errors Prisma 7.10 and its driver adapters raised under real faults
// (see database-faults.test.ts, which provokes each one): the same classes, codes, metas and messages.

const clientVersion = '7.10.1';

/** A raw query (`$executeRawUnsafe`, `$queryRawUnsafe`) the driver adapter failed. */
function rawQueryFailed(code: string, message: string, cause: Record<string, unknown>) {
  return new PrismaClientKnownRequestError(
    `\nInvalid \`prisma.$executeRawUnsafe()\` invocation:\n\n\nRaw query failed. Code: \`${code}\`. Message: \`${message}\``,
    { code: 'P2010', clientVersion, meta: { driverAdapterError: new DriverAdapterError(cause as never) } },
  );
}

/** What adapter-pg's error carries for a PostgreSQL error it does not map to a kind of its own. */
function postgres(code: string, message: string, severity = 'FATAL') {
  return { originalCode: code, originalMessage: message, kind: 'postgres', code, severity, message };
}

/** What adapter-mariadb's error carries for a MariaDB or connector error it does not map. */
function mysql(code: number, message: string, state: string) {
  return { originalCode: String(code), originalMessage: message, kind: 'mysql', code, message, state };
}

/** An error of pg itself (no code), which Prisma rethrows with its `clientVersion`. */
function pgClientError(message: string) {
  return Object.assign(new Error(message), { clientVersion });
}

function expired(operation: 'query' | 'commit', model?: string) {
  return new PrismaClientKnownRequestError(
    `\nInvalid \`tx.payment.create()\` invocation:\n\nTransaction API error: A ${operation} cannot be executed on an expired transaction. The timeout for this transaction was 500 ms, however 805 ms passed since the start of the transaction. Consider increasing the interactive transaction timeout or doing less work in the transaction.`,
    {
      code: 'P2028',
      clientVersion,
      meta: { ...(model ? { modelName: model } : {}), operation, timeout: 500, timeTaken: 805 },
    },
  );
}

const writeConflict = { kind: 'TransactionWriteConflict' };

/** What Node's fetch throws when a payment gateway (not the store) refuses the connection. */
function gatewayDown() {
  const cause = Object.assign(new Error('connect ECONNREFUSED 10.0.0.7:443'), { code: 'ECONNREFUSED' });
  return new TypeError('fetch failed', { cause });
}

const cases: [string, unknown, DatabaseFailure | undefined][] = [
  // PostgreSQL
  [
    'PostgreSQL 57P01 from a statement (server stopped, backend terminated)',
    rawQueryFailed(
      '57P01',
      'terminating connection due to administrator command',
      postgres('57P01', 'terminating connection due to administrator command'),
    ),
    'connection',
  ],
  [
    'PostgreSQL 57P01 at COMMIT (a bare driver adapter error)',
    new DriverAdapterError(postgres('57P01', 'terminating connection due to administrator command') as never),
    'connection',
  ],
  [
    'PostgreSQL 17 25P04 at COMMIT (transaction_timeout: the server ended the session)',
    new DriverAdapterError(postgres('25P04', 'terminating connection due to transaction timeout') as never),
    'connection',
  ],
  [
    'PostgreSQL 57P03 when connecting (shutting down)',
    rawQueryFailed(
      '57P03',
      'the database system is shutting down',
      postgres('57P03', 'the database system is shutting down'),
    ),
    'connection',
  ],
  [
    'PostgreSQL 57P03 when connecting (starting up)',
    rawQueryFailed(
      '57P03',
      'the database system is starting up',
      postgres('57P03', 'the database system is starting up'),
    ),
    'connection',
  ],
  [
    'PostgreSQL 57P02 (another backend crashed)',
    rawQueryFailed(
      '57P02',
      'terminating connection because of crash of another server process',
      postgres('57P02', 'terminating connection because of crash of another server process', 'WARNING'),
    ),
    'connection',
  ],
  [
    "pg's connection error on a client that lost its connection",
    pgClientError('Client has encountered a connection error and is not queryable'),
    'connection',
  ],
  [
    "pg's connection terminated (killed backend or postmaster)",
    pgClientError('Connection terminated unexpectedly'),
    'connection',
  ],
  [
    "pg's query_timeout, which destroys a pipelining connection's socket",
    pgClientError('Query read timeout'),
    'connection',
  ],
  [
    'server down: DatabaseNotReachable',
    rawQueryFailed('N/A', "Can't reach database server at 127.0.0.1:5432", {
      kind: 'DatabaseNotReachable',
      host: '127.0.0.1',
      port: 5432,
    }),
    'connection',
  ],
  [
    'TLS refused or failed: TlsConnectionError',
    rawQueryFailed('N/A', 'Error opening a TLS connection', {
      kind: 'TlsConnectionError',
      reason: 'The server does not support SSL connections',
    }),
    'connection',
  ],
  [
    'PostgreSQL 40001 from a raw statement (P2010)',
    rawQueryFailed('40001', 'could not serialize access due to concurrent update', {
      originalCode: '40001',
      originalMessage: 'could not serialize',
      ...writeConflict,
    }),
    'writeConflict',
  ],
  [
    'PostgreSQL 40001 from a model query (P2034)',
    new PrismaClientKnownRequestError(
      'Transaction failed due to a write conflict or a deadlock. Please retry your transaction',
      {
        code: 'P2034',
        clientVersion,
        meta: {
          modelName: 'Payment',
          driverAdapterError: new DriverAdapterError({
            originalCode: '40001',
            originalMessage: 'could not serialize',
            ...writeConflict,
          } as never),
        },
      },
    ),
    'writeConflict',
  ],
  [
    'CockroachDB 40001 as P2010 with meta.code',
    new PrismaClientKnownRequestError(
      'Raw query failed. Code: `40001`. Message: `restart transaction: TransactionRetryWithProtoRefreshError`',
      {
        code: 'P2010',
        clientVersion,
        meta: {
          code: '40001',
          message: 'restart transaction: TransactionRetryWithProtoRefreshError: WriteTooOldError',
        },
      },
    ),
    'writeConflict',
  ],
  [
    'PostgreSQL 40P01 deadlock',
    rawQueryFailed('40P01', 'deadlock detected', {
      originalCode: '40P01',
      originalMessage: 'deadlock detected',
      ...writeConflict,
    }),
    'writeConflict',
  ],
  ['an expired transaction, at the resolver’s query', expired('query', 'Payment'), 'expired'],
  ['an expired transaction, at COMMIT', expired('commit'), 'expired'],
  [
    'a transaction Prisma already rolled back',
    new PrismaClientKnownRequestError(
      'Transaction API error: Transaction already closed: A query cannot be executed on a transaction that was rolled back.',
      { code: 'P2028', clientVersion },
    ),
    'expired',
  ],
  [
    'no connection within maxWait',
    new PrismaClientKnownRequestError(
      'Transaction API error: Unable to start a transaction in the given time.',
      { code: 'P2028', clientVersion },
    ),
    'connection',
  ],
  // MariaDB
  [
    'MariaDB 45009: socket closed (server stopped or killed mid-statement)',
    rawQueryFailed(
      '45009',
      'socket has unexpectedly been closed',
      mysql(45009, 'socket has unexpectedly been closed', '08S01'),
    ),
    'connection',
  ],
  [
    'MariaDB 45013 from a model query: the connection was closed while idle in the transaction',
    new PrismaClientKnownRequestError(
      'Database error. Code: `45013`. Message: `Cannot execute new commands: connection closed`',
      {
        code: 'P2039',
        clientVersion,
        meta: {
          modelName: 'Payment',
          driverAdapterError: new DriverAdapterError(
            mysql(45013, 'Cannot execute new commands: connection closed', '08S01') as never,
          ),
        },
      },
    ),
    'connection',
  ],
  [
    'MariaDB 45028: pool timeout, server down',
    rawQueryFailed('45028', 'pool timeout: failed to retrieve a connection from pool after 1000ms', {
      ...mysql(45028, 'pool timeout: failed to retrieve a connection from pool after 1000ms', 'HY000'),
      cause: 'connect ECONNREFUSED 127.0.0.1:3306',
    }),
    'connection',
  ],
  [
    'MariaDB 1927: connection killed',
    rawQueryFailed('1927', 'Connection was killed', mysql(1927, 'Connection was killed', '70100')),
    'connection',
  ],
  [
    'MariaDB 1053: server shutdown in progress',
    rawQueryFailed(
      '1053',
      'Server shutdown in progress',
      mysql(1053, 'Server shutdown in progress', '08S01'),
    ),
    'connection',
  ],
  [
    'Galera 1047: node not ready',
    rawQueryFailed(
      '1047',
      'WSREP has not yet prepared node for application use',
      mysql(1047, 'WSREP has not yet prepared node for application use', '08S01'),
    ),
    'connection',
  ],
  [
    'MariaDB 1213 deadlock, and Galera’s certification failure',
    rawQueryFailed(
      '1213',
      'WSREP detected deadlock/conflict and aborted the transaction. Try restarting the transaction',
      {
        originalCode: '1213',
        originalMessage:
          'WSREP detected deadlock/conflict and aborted the transaction. Try restarting the transaction',
        ...writeConflict,
      },
    ),
    'writeConflict',
  ],
  // SQLite
  [
    'SQLite busy at a statement',
    rawQueryFailed('SQLITE_BUSY', 'database is locked', {
      kind: 'SocketTimeout',
      originalCode: 'SQLITE_BUSY',
      originalMessage: 'database is locked',
    }),
    'busy',
  ],
  [
    'SQLite busy at COMMIT',
    new DriverAdapterError({
      kind: 'SocketTimeout',
      originalCode: 'SQLITE_BUSY',
      originalMessage: 'database is locked',
    } as never),
    'busy',
  ],
  // Neither
  [
    'a unique constraint',
    new PrismaClientKnownRequestError('Unique constraint failed on the fields: (`id`)', {
      code: 'P2002',
      clientVersion,
      meta: { modelName: 'Payment' },
    }),
    undefined,
  ],
  [
    'MariaDB 1317: query interrupted, the connection lives on',
    rawQueryFailed(
      '1317',
      'Query execution was interrupted',
      mysql(1317, 'Query execution was interrupted', '70100'),
    ),
    undefined,
  ],
  ['a plain error', new Error('card declined'), undefined],
];

describe('classify', () => {
  it.each(cases)('%s', (_label, error, expected) => {
    expect(classify(error)).toBe(expected);
  });

  it('looks through a wrapper that keeps the database error as its cause', () => {
    const wrapped = new Error('INTERNAL_SERVER_ERROR', {
      cause: pgClientError('Connection terminated unexpectedly'),
    });
    expect(classify(wrapped)).toBe('connection');
    expect(isDatabaseError(wrapped)).toBe(true);
  });

  it('looks through a GraphQL operation that failed with the resolver’s error as its originalError', () => {
    const fieldError = Object.assign(new Error('A query cannot be executed'), {
      originalError: expired('query'),
    });
    const failedOperation = Object.assign(new Error('The operation failed'), { errors: [fieldError] });
    expect(classify(failedOperation)).toBe('expired');
    expect(isDatabaseError(failedOperation)).toBe(true);
  });

  it('does not take a gateway’s network error for a database error', () => {
    expect(isDatabaseError(gatewayDown())).toBe(false);
  });
});

describe('isTimeout', () => {
  it('tells a lock or statement timeout, on either database, from a deadlock and other failures', () => {
    const lockWait = 'Lock wait timeout exceeded; try restarting transaction';
    expect(isTimeout(rawQueryFailed('1205', lockWait, mysql(1205, lockWait, 'HY000')))).toBe(true);
    const statement = 'Query execution was interrupted (max_statement_time exceeded)';
    expect(isTimeout(rawQueryFailed('1969', statement, mysql(1969, statement, '70100')))).toBe(true);
    const lockTimeout = 'canceling statement due to lock timeout';
    expect(isTimeout(rawQueryFailed('55P03', lockTimeout, postgres('55P03', lockTimeout, 'ERROR')))).toBe(
      true,
    );
    const canceled = 'canceling statement due to statement timeout';
    expect(isTimeout(rawQueryFailed('57014', canceled, postgres('57014', canceled, 'ERROR')))).toBe(true);

    const deadlock = 'Deadlock found when trying to get lock; try restarting transaction';
    expect(isTimeout(rawQueryFailed('1213', deadlock, mysql(1213, deadlock, '40001')))).toBe(false);
    const aborted = 'current transaction is aborted, commands ignored until end of transaction block';
    expect(isTimeout(rawQueryFailed('25P02', aborted, postgres('25P02', aborted, 'ERROR')))).toBe(false);
    expect(isTimeout(new Error('card declined'))).toBe(false);
  });
});

describe('asStoreError', () => {
  it('answers an expired transaction with IDEMPOTENCY_TRANSACTION_EXPIRED (503)', () => {
    const error = asStoreError(expired('query'));
    expect(error).toBeInstanceOf(IdempotencyTransactionExpiredError);
    expect((error as IdempotencyTransactionExpiredError).status).toBe(503);
  });

  it.each(cases.filter(([, , expected]) => expected === 'connection' || expected === 'busy'))(
    'answers %s with IDEMPOTENCY_STORE_UNAVAILABLE (503)',
    (_label, cause) => {
      const error = asStoreError(cause);
      expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect((error as IdempotencyStoreUnavailableError).cause).toBe(cause);
    },
  );

  it('passes anything else through', () => {
    const error = new Error('card declined');
    expect(asStoreError(error)).toBe(error);
  });
});

describe('retryingTransaction', () => {
  const conflict = () =>
    rawQueryFailed('40001', 'could not serialize', {
      originalCode: '40001',
      originalMessage: 'x',
      ...writeConflict,
    });

  /**
   * `retryingTransaction` over work that throws `thrown()` on every attempt, asking `aborted` (when
   * given) whether the database aborted the transaction: the error it ends with, and how many times
   * the work and the question ran.
   */
  async function failingEveryAttempt(
    thrown: () => unknown,
    options: Parameters<typeof retryingTransaction>[1],
    aborted?: () => unknown,
  ) {
    const counts = { attempts: 0, probes: 0 };
    const error = await retryingTransaction(
      async (inside) =>
        inside(
          async () => {
            counts.attempts++;
            throw thrown();
          },
          {
            aborted:
              aborted &&
              (async () => {
                counts.probes++;
                return aborted();
              }),
          },
        ),
      options,
    ).catch((e: unknown) => e);
    return { error, ...counts };
  }

  it('runs a transaction that hit a write conflict again, up to maxRetries times, then answers 503', async () => {
    const { error, attempts } = await failingEveryAttempt(conflict, { maxRetries: 2 });
    expect(attempts).toBe(3);
    expect(classify(error)).toBe('writeConflict');
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' });
  });

  it('rethrows the resolver’s own error untouched, even one caused by ECONNREFUSED', async () => {
    const thrown = gatewayDown();
    const { error, attempts } = await failingEveryAttempt(() => thrown, { maxRetries: 3 });
    expect(error).toBe(thrown);
    expect(attempts).toBe(1);
  });

  it('rethrows an error of ours the resolver let through as it is, whatever database failure it wraps', async () => {
    // A nested lease-mode call (a gateway's charge) whose own store lost its connection after the
    // charge: IDEMPOTENCY_OUTCOME_UNKNOWN, never a 503 nor a run again (the charge would repeat).
    const lost = new IdempotencyStoreUnavailableError('The idempotency store cannot be reached', {
      cause: pgClientError('Connection terminated unexpectedly'),
    });
    const nestedConflict = new IdempotencyStoreUnavailableError('conflicts left', { cause: conflict() });
    for (const nested of [
      new IdempotencyOutcomeUnknownError('The mutation ran, but its result could not be stored', {
        cause: lost,
      }),
      new IdempotencyOutcomeUnknownError('The mutation ran', { cause: nestedConflict }),
      new Error('charge failed', { cause: new IdempotencyOutcomeUnknownError('ran', { cause: lost }) }),
    ]) {
      const { error, attempts } = await failingEveryAttempt(() => nested, { maxRetries: 3 });
      expect(error).toBe(nested);
      expect(attempts).toBe(1);
    }
  });

  it('judges an aggregate by its database error alone: a sibling field’s gateway ECONNRESET is not the store’s', async () => {
    // A header-key GraphQL operation: one field hit a unique constraint, another's gateway call
    // failed with ECONNRESET (it may have charged). Nothing says the store is unavailable.
    const unique = Object.assign(new Error('Unique constraint failed'), {
      code: 'P2002',
      clientVersion: '7.10.0',
    });
    const failed = Object.assign(new Error('Unique constraint failed'), {
      errors: [{ originalError: unique }, { originalError: gatewayDown() }],
    });
    const { error, attempts } = await failingEveryAttempt(() => failed, { maxRetries: 3 });
    expect(error).toBe(failed);
    expect(attempts).toBe(1);
  });

  it('runs the work again when it failed in a transaction the database had aborted, then answers 503', async () => {
    // Galera's background abort: the resolver's read-back ran outside the aborted transaction and
    // found nothing; the probe on the transaction's connection then got the 1213.
    const readBack = new TypeError("Cannot read properties of null (reading 'id')");
    const { error, attempts, probes } = await failingEveryAttempt(
      () => readBack,
      { maxRetries: 2 },
      conflict,
    );
    expect(attempts).toBe(3);
    expect(probes).toBe(3);
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(classify(error)).toBe('writeConflict');
    // Both the database's answer and the work's own error are kept.
    expect((error as Error).cause).toMatchObject({ errors: [expect.anything(), readBack] });
  });

  it("does not probe after this library's own error: a claim the database stopped waiting for is the key in progress", async () => {
    // MariaDB with innodb_rollback_on_timeout rolls the whole transaction back on a lock wait
    // timeout: the probe would find it gone and run the transaction again, waiting out the lock again.
    const message = 'Lock wait timeout exceeded; try restarting transaction';
    const inProgress = new IdempotencyKeyInProgressError(1_000, {
      cause: rawQueryFailed('1205', message, mysql(1205, message, 'HY000')),
    });
    const { error, attempts, probes } = await failingEveryAttempt(
      () => inProgress,
      { maxRetries: 3 },
      () => new Error('The database ended the transaction on its own: the session is no longer in one'),
    );
    expect(error).toBe(inProgress);
    expect(attempts).toBe(1);
    expect(probes).toBe(0);
  });

  it('rethrows the work’s error as it is when the transaction is still open', async () => {
    const declined = new Error('card declined');
    const { error, attempts } = await failingEveryAttempt(
      () => declined,
      { maxRetries: 3 },
      () => undefined,
    );
    expect(error).toBe(declined);
    expect(attempts).toBe(1);
  });

  it('does not probe after an error that already says what happened to the database', async () => {
    const { error, attempts, probes } = await failingEveryAttempt(
      conflict,
      { maxRetries: 1 },
      () => undefined,
    );
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(attempts).toBe(2);
    expect(probes).toBe(0);
  });

  it('answers a connection lost at COMMIT (thrown by Prisma, not by the work) with 503, without running again', async () => {
    let attempts = 0;
    const lost = new DriverAdapterError(
      postgres('57P01', 'terminating connection due to administrator command') as never,
    );
    const error = await retryingTransaction(
      async (inside) => {
        await inside(async () => attempts++);
        throw lost;
      },
      { maxRetries: 3 },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(attempts).toBe(1);
  });

  it('waits out SQLite’s busy lock asynchronously, then gives up with 503 after busyWaitMs', async () => {
    const busy = () =>
      rawQueryFailed('SQLITE_BUSY', 'database is locked', {
        kind: 'SocketTimeout',
        originalCode: 'SQLITE_BUSY',
      });
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 5);
    const started = performance.now();
    const { error, attempts } = await failingEveryAttempt(busy, { maxRetries: 0, busyWaitMs: 300 });
    clearInterval(ticker);
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(attempts).toBeGreaterThan(3);
    expect(performance.now() - started).toBeLessThan(600);
    // The timer kept firing while the store waited.
    expect(ticks).toBeGreaterThan(10);
  });
});

describe('standalone', () => {
  // An autocommitted statement that Galera's certification failed (two nodes wrote the same key):
  // Prisma P2010 with MariaDB's 1213. It did not take effect, so running it again is safe.
  const certificationFailure = () =>
    rawQueryFailed('1213', 'Deadlock found when trying to get lock; try restarting transaction', {
      originalCode: '1213',
      originalMessage: 'Deadlock found when trying to get lock; try restarting transaction',
      ...writeConflict,
    });
  const client = { $queryRawUnsafe: async () => [], $executeRawUnsafe: async () => 0 } as never;

  it('runs a statement that lost a write conflict again, and returns what the next run returns', async () => {
    let runs = 0;
    const result = await standalone(client, 'mysql', async () => {
      if (++runs < 3) throw certificationFailure();
      return 'claimed';
    });
    expect(result).toBe('claimed');
    expect(runs).toBe(3);
  });

  it('answers IDEMPOTENCY_STORE_UNAVAILABLE (503) once its retries are spent', async () => {
    let runs = 0;
    const error = await standalone(client, 'mysql', async () => {
      runs++;
      throw certificationFailure();
    }).catch((e: unknown) => e);
    expect(runs).toBe(STATEMENT_CONFLICT_RETRIES + 1);
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(classify(error)).toBe('writeConflict');
  });

  it('does not run a statement again after any other error', async () => {
    let runs = 0;
    const duplicate = rawQueryFailed('1062', "Duplicate entry 'k' for key 'PRIMARY'", {
      originalCode: '1062',
      originalMessage: "Duplicate entry 'k' for key 'PRIMARY'",
      kind: 'UniqueConstraintViolation',
    });
    const error = await standalone(client, 'mysql', async () => {
      runs++;
      throw duplicate;
    }).catch((e: unknown) => e);
    expect(runs).toBe(1);
    expect(error).toBe(duplicate);
  });
});
