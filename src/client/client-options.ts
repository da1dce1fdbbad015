/**
 * What one option must be: `undefined` when `value` will do, else its description for the error.
 * `client` names the client, for the errors of options nested in this one.
 */
export type OptionRule = (value: unknown, client: string) => string | undefined;

/** An HTTP header name: RFC 9110's token. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** A header name (`header`). */
export const headerName: OptionRule = (value) =>
  typeof value === 'string' && TOKEN.test(value) ? undefined : 'a header name';
/** A name (`inputField`, `argumentName`). */
export const nonEmptyString: OptionRule = (value) =>
  typeof value === 'string' && value !== '' ? undefined : 'a non-empty string';
/** A function (`generateKey`). */
export const aFunction: OptionRule = (value) => (typeof value === 'function' ? undefined : 'a function');
/** One of these strings (`sendKeyIn`). */
export const oneOf =
  (...allowed: string[]): OptionRule =>
  (value) =>
    allowed.includes(value as string) ? undefined : `one of ${allowed.map((a) => `'${a}'`).join(', ')}`;
/** `trace` from `@opentelemetry/api`, or anything with its `getActiveSpan`. */
export const activeSpanSource: OptionRule = (value) =>
  typeof (value as { getActiveSpan?: unknown } | null)?.getActiveSpan === 'function'
    ? undefined
    : "@opentelemetry/api's trace";

// `Infinity` is an answer: attempts without end, no cap on the delay (but Node's timer limit).
const count: OptionRule = (value) =>
  (Number.isInteger(value) || value === Infinity) && (value as number) >= 1
    ? undefined
    : 'an integer ≥ 1, or Infinity';
const delay: OptionRule = (value) =>
  typeof value === 'number' && value >= 0 ? undefined : 'a number of milliseconds ≥ 0';

/** The rules of `RetryOptions`. */
export const retryOptions: OptionRule = (value, client) => {
  checkOptions(client, value, { attempts: count, baseDelayMs: delay, maxDelayMs: delay }, 'retry.');
  return undefined;
};

/**
 * Throws, naming the option, when `options` hold one that is not in `rules` (a misspelt option would
 * be ignored) or one that breaks its rule: a RangeError for a number out of range (`attempts: NaN`
 * would retry forever, a negative delay not wait), a TypeError otherwise. `undefined` takes the
 * default. `prefix` names the option holding `options`, if any (`retry.`).
 */
export function checkOptions(
  client: string,
  options: unknown,
  rules: Record<string, OptionRule>,
  prefix = '',
): void {
  if (typeof options !== 'object' || options === null)
    throw new TypeError(`${client}: ${prefix ? `${prefix.slice(0, -1)} ` : 'the options '}must be an object`);
  for (const [name, value] of Object.entries(options)) {
    const rule = rules[name];
    if (rule === undefined)
      throw new TypeError(
        `${client}: unknown option ${prefix}${name} (known: ${Object.keys(rules).join(', ')})`,
      );
    const expected = value === undefined ? undefined : rule(value, client);
    if (expected === undefined) continue;
    const shown = typeof value === 'string' ? JSON.stringify(value) : String(value);
    const ErrorType = typeof value === 'number' ? RangeError : TypeError;
    throw new ErrorType(`${client}: ${prefix}${name} must be ${expected}, not ${shown}`);
  }
}
