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

function isSql(value: unknown): value is Sql {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Sql).text === 'string' &&
    Array.isArray((value as Sql).values)
  );
}

const numberedTexts = new Map<string, string>();

/**
 * The statement's text for `provider`: PostgreSQL numbers its placeholders (`?` → `$1`, `$2`, …;
 * no statement here has a literal `?`). Texts are few and repeat, so they are numbered once.
 */
export function textFor(provider: Provider, text: string): string {
  if (provider !== 'postgresql' && provider !== 'cockroachdb') return text;
  let numbered = numberedTexts.get(text);
  if (numbered === undefined) {
    let n = 0;
    numbered = text.replace(/\?/g, () => `$${++n}`);
    if (numberedTexts.size < 1_000) numberedTexts.set(text, numbered);
  }
  return numbered;
}
