/** The kind of a GraphQL operation. */
export type OperationType = 'query' | 'mutation' | 'subscription';

/**
 * The tokens that matter here: names, punctuators and strings (their text is never needed).
 * `invalid` ends the scan (an unterminated string).
 */
type Token = { kind: 'name' | 'punctuator'; value: string } | { kind: 'string' } | { kind: 'invalid' };

const NAME = /[_A-Za-z][_0-9A-Za-z]*/y;

/**
 * A small GraphQL lexer, instead of `graphql`'s `parse`: the client must not need `graphql`
 * installed. It skips whitespace, commas and comments, reads block strings and their `\"""`
 * escape, and lets digits and other characters through as single punctuators.
 */
function* tokensOf(document: string): Generator<Token> {
  let i = 0;
  while (i < document.length) {
    const char = document[i]!;
    if (char === '#') {
      while (i < document.length && document[i] !== '\n' && document[i] !== '\r') i++;
    } else if (char === '"') {
      i = skipString(document, i);
      if (i < 0) {
        yield { kind: 'invalid' };
        return;
      }
      yield { kind: 'string' };
      continue;
    } else if (/[_A-Za-z]/.test(char)) {
      NAME.lastIndex = i;
      const value = NAME.exec(document)![0];
      yield { kind: 'name', value };
      i += value.length;
      continue;
    } else if (!/[\s,\uFEFF]/.test(char)) {
      yield { kind: 'punctuator', value: char };
    }
    i++;
  }
}

interface Definition {
  keyword: string;
  name?: string;
}

/**
 * The type of the operation a GraphQL request runs: the one named `operationName`, or the only
 * operation of the document. Returns `undefined` when that cannot be told (no such operation,
 * several without a name to choose, unbalanced brackets), so the caller leaves the request alone.
 *
 * Only the top-level `keyword Name` heads are read; everything inside brackets (variable
 * defaults, directive arguments, selection sets) is skipped, so fragments around the operation,
 * comments and strings do not confuse it.
 */
export function operationTypeOf(document: string, operationName?: string | null): OperationType | undefined {
  const definitions: Definition[] = [];
  let current: Definition | undefined;
  let expectName = false;
  let depth = 0;
  for (const token of tokensOf(document)) {
    if (token.kind === 'invalid') return undefined;
    if (token.kind === 'string') continue;
    const { value } = token;
    if (token.kind === 'name') {
      if (depth > 0) continue;
      if (!current) {
        current = { keyword: value };
        expectName = true;
      } else if (expectName) {
        current.name = value;
        expectName = false;
      }
    } else if (value === '{' || value === '(' || value === '[') {
      if (depth === 0 && value === '{' && !current) current = { keyword: 'query' };
      depth++;
      expectName = false;
    } else if (value === '}' || value === ')' || value === ']') {
      depth--;
      if (depth < 0) return undefined;
      if (depth === 0 && value === '}' && current) {
        definitions.push(current);
        current = undefined;
      }
    } else if (depth === 0 && value === '@') {
      expectName = false; // a directive's name is not the operation's
    }
  }
  if (depth !== 0 || current) return undefined;
  const operations = definitions.filter(
    (d): d is Definition & { keyword: OperationType } =>
      d.keyword === 'query' || d.keyword === 'mutation' || d.keyword === 'subscription',
  );
  const chosen = operationName
    ? operations.find((d) => d.name === operationName)
    : operations.length === 1
      ? operations[0]
      : undefined;
  return chosen?.keyword;
}

/**
 * Whether the document gives an argument (or input field) called `name` a value anywhere: `name:`
 * inside parentheses, followed by anything but `null` or a variable that `variables` leaves unset
 * or null. Variables (`$name`) and aliases in selection sets are not the argument.
 */
export function passesArgument(
  document: string,
  name: string,
  variables: Readonly<Record<string, unknown>> = {},
): boolean {
  let parens = 0;
  let previous: Token | undefined;
  let candidate = false;
  let value: 'next' | 'variable' | undefined;
  for (const token of tokensOf(document)) {
    if (token.kind === 'invalid') return false;
    if (value === 'variable') {
      if (token.kind === 'name' && variables[token.value] != null) return true;
      value = undefined;
    } else if (value === 'next') {
      if (token.kind === 'punctuator' && token.value === '$') value = 'variable';
      else if (token.kind === 'name' && token.value === 'null') value = undefined;
      else return true;
    } else if (candidate && token.kind === 'punctuator' && token.value === ':') {
      value = 'next';
    }
    if (token.kind === 'punctuator') {
      if (token.value === '(') parens++;
      else if (token.value === ')') parens--;
    }
    candidate =
      token.kind === 'name' &&
      token.value === name &&
      parens > 0 &&
      !(previous?.kind === 'punctuator' && previous.value === '$');
    previous = token;
  }
  return false;
}

/** The index just past the string starting at `start` (`"…"` or `"""…"""`), or -1 if it never ends. */
function skipString(text: string, start: number): number {
  if (text.startsWith('"""', start)) {
    for (let i = start + 3; i < text.length; i++) {
      if (text[i] === '\\' && text.startsWith('"""', i + 1)) i += 3;
      else if (text.startsWith('"""', i)) return i + 3;
    }
    return -1;
  }
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === '\\') i++;
    else if (text[i] === '"') return i + 1;
    else if (text[i] === '\n' || text[i] === '\r') return -1;
  }
  return -1;
}
