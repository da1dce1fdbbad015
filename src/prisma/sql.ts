import { createHash } from 'node:crypto';
import type { Provider } from './client.js';

/** A piece of SQL and its parameters, side by side; placeholders are written `?`. */
export interface Sql {
  readonly text: string;
  readonly values: readonly unknown[];
}

/**
 * Builds SQL from a template: each interpolated value becomes a `?` parameter, except an `Sql`
 * fragment, whose text and parameters are spliced in. So every statement reads with its
 * parameters where they go: sql`UPDATE t SET result = ${result} WHERE …`.
 */
export function sql(strings: TemplateStringsArray, ...parts: unknown[]): Sql {
  let text = strings[0]!;
  const values: unknown[] = [];
  parts.forEach((part, i) => {
    if (isSql(part)) {
      text += part.text;
      values.push(...part.values);
    } else {
      text += '?';
      values.push(part);
    }
    text += strings[i + 1]!;
  });
  return { text, values };
}

/** Trusted SQL text with no parameters (a table name, a clock expression). */
export function raw(text: string, values: readonly unknown[] = []): Sql {
  return { text, values };
}

/**
 * Rows whose `(scope, idempotency_key)` is one of `keys`, compared byte for byte on MySQL/MariaDB
 * (whatever the table's collation); `1 = 0` for none.
 *
 * MySQL/MariaDB get one row-constructor `IN` list: MariaDB reads it as ranges of the primary key and
 * tests each row it reads against the sorted list, where n OR'ed pairs were tested one by one on
 * every row (a sweep's batch of 1,000 keys: 120 ms a `DELETE`, 90 of them testing, against 18 ms).
 * A list of one row gets no range of the primary key on MariaDB 10.11 (it reads the expiry index
 * instead, and waits on the rows a sweep's pick skipped): one key stays two equalities.
 */
export function oneOfKeys(provider: Provider, keys: readonly { scope: string; key: string }[]): Sql {
  return oneOfRows(
    provider,
    ['scope', 'idempotency_key'],
    keys.map(({ scope, key }) => [scope, key]),
  );
}

/** `oneOfKeys` for rows whose key has other `columns` (a step's: scope, key and name). */
export function oneOfRows(
  provider: Provider,
  columns: readonly string[],
  rows: readonly (readonly unknown[])[],
): Sql {
  if (rows.length === 0) return raw('1 = 0');
  const exact = provider === 'mysql' ? ' COLLATE utf8mb4_bin' : '';
  if (provider === 'mysql' && rows.length > 1) {
    const row = `(${columns.map(() => `?${exact}`).join(', ')})`;
    return raw(`(${columns.join(', ')}) IN (${rows.map(() => row).join(', ')})`, rows.flat());
  }
  const one = `(${columns.map((column) => `${column} = ?${exact}`).join(' AND ')})`;
  return raw(rows.map(() => one).join(' OR '), rows.flat());
}

function isSql(value: unknown): value is Sql {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Sql).text === 'string' &&
    Array.isArray((value as Sql).values)
  );
}

const numberedTexts = new Map<string, string>();
/** The numbered texts, each with the name it is prepared under (`idempotencyStatementNames`). */
const statementNames = new Map<string, string>();

/**
 * The statement's text for `provider`: PostgreSQL numbers its placeholders (`?` → `$1`, `$2`, …;
 * no statement here has a literal `?`). Texts are few and repeat, so they are numbered once, and
 * each is given a name to be prepared under.
 */
export function textFor(provider: Provider, text: string): string {
  if (provider !== 'postgresql' && provider !== 'cockroachdb') return text;
  let numbered = numberedTexts.get(text);
  if (numbered === undefined) {
    let n = 0;
    numbered = text.replace(/\?/g, () => `$${++n}`);
    if (numberedTexts.size < 1_000) {
      numberedTexts.set(text, numbered);
      statementNames.set(numbered, `im_${createHash('sha256').update(numbered).digest('hex').slice(0, 20)}`);
    }
  }
  return numbered;
}

/**
 * `PrismaPg`'s `statementNameGenerator` for this library's own statements on PostgreSQL: each is
 * prepared once per connection under a name of its text's hash, and runs from then on without
 * being parsed and planned again (a replay's read takes 0.2 to 0.3 ms less in process). Every other
 * statement (your own, Prisma's) gets `''`, `pg`'s unnamed statement, and runs as it would without
 * a generator. `adapterForUrl`
 * sets it; with a `PrismaPg` of your own:
 *
 * ```ts
 * new PrismaPg(pool, { statementNameGenerator: idempotencyStatementNames })
 * ```
 *
 * Named statements live on the server's connection: leave it out behind PgBouncer in transaction
 * mode before 1.21 (which cannot keep them), as `adapterForUrl` does for a `?pgbouncer=true` URL.
 */
export function idempotencyStatementNames(query: { sql: string }): string {
  return statementNames.get(query.sql) ?? '';
}
