/** The kind of a GraphQL operation. */
export type OperationType = 'query' | 'mutation' | 'subscription';

/**
 * The tokens that matter here: names, punctuators (`...` is one) and strings and numbers (their
 * text is never needed). `invalid` ends the scan (an unterminated string).
 */
type Token =
  | { kind: 'name' | 'punctuator'; value: string }
  | { kind: 'string' }
  | { kind: 'number' }
  | { kind: 'invalid' };

const NAME = /[_A-Za-z][_0-9A-Za-z]*/y;
const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/**
 * A small GraphQL lexer, instead of `graphql`'s `parse`: the client must not need `graphql`
 * installed. It skips whitespace, commas and comments, reads block strings and their `\"""`
 * escape, numbers and the spread `...`, and lets other characters through as single punctuators.
 */
function* tokensOf(document: string): Generator<Token> {
  let i = 0;
  while (i < document.length) {
    const char = document[i]!;
    NUMBER.lastIndex = i;
    const numberLength = /[-\d]/.test(char) ? (NUMBER.exec(document)?.[0].length ?? 0) : 0;
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
    } else if (numberLength > 0) {
      yield { kind: 'number' };
      i += numberLength;
      continue;
    } else if (document.startsWith('...', i)) {
      yield { kind: 'punctuator', value: '...' };
      i += 3;
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
    if (token.kind === 'string' || token.kind === 'number') continue;
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

/** How many root fields an operation selects, and how many of them pass a key argument. */
export interface KeyCoverage {
  /** Root fields, through fragments (`__typename` and other meta fields left out). */
  fields: number;
  /** Those whose key argument has a value: not `null`, nor a variable unset (without a default) or null. */
  keyed: number;
}

/**
 * Which root fields of the operation a request runs (the one named `operationName`, or the only
 * one) pass the argument `name` a value, as the server's field-level keys read it: only a root
 * field's own argument counts, not an input field nor a field below the root. `undefined` when
 * the document cannot be read (the server will refuse it) or names no such operation.
 */
export function rootKeyCoverage(
  document: string,
  operationName: string | null | undefined,
  name: string,
  variables: Readonly<Record<string, unknown>> = {},
): KeyCoverage | undefined {
  const parsed = parseDocument(document);
  if (!parsed) return undefined;
  const { operations, fragments } = parsed;
  const operation = operationName
    ? operations.find((o) => o.name === operationName)
    : operations.length === 1
      ? operations[0]
      : undefined;
  if (!operation) return undefined;
  const passed = (value: Value | undefined): boolean => {
    if (value === undefined || value.kind === 'null') return false;
    if (value.kind === 'literal') return true;
    if (Object.hasOwn(variables, value.name)) return variables[value.name] != null;
    return passed(operation.defaults.get(value.name));
  };
  const coverage: KeyCoverage = { fields: 0, keyed: 0 };
  const spread = new Set<string>();
  const count = (selections: Selection[]): boolean => {
    for (const selection of selections) {
      if (selection.kind === 'field') {
        if (selection.name.startsWith('__')) continue;
        coverage.fields++;
        if (passed(selection.args.get(name))) coverage.keyed++;
      } else if (selection.kind === 'inline') {
        if (!count(selection.selections)) return false;
      } else if (!spread.has(selection.name)) {
        // A fragment spread twice selects the same fields twice, which GraphQL merges.
        spread.add(selection.name);
        const fragment = fragments.get(selection.name);
        if (!fragment || !count(fragment)) return false;
      }
    }
    return true;
  };
  return count(operation.selections) ? coverage : undefined;
}

/** An argument's value, as far as keys are concerned. */
type Value = { kind: 'null' } | { kind: 'literal' } | { kind: 'variable'; name: string };

type Selection =
  | { kind: 'field'; name: string; args: Map<string, Value> }
  | { kind: 'spread'; name: string }
  | { kind: 'inline'; selections: Selection[] };

interface Operation {
  name?: string;
  /** The variables' default values. */
  defaults: Map<string, Value>;
  selections: Selection[];
}

/** Raised (and caught) when the document does not follow GraphQL's executable grammar. */
class Unreadable extends Error {}

/**
 * The operations and fragments of an executable document, with what `rootKeyCoverage` needs:
 * each selection set's fields, their arguments, spreads and inline fragments. `undefined` when the
 * document is not one.
 */
function parseDocument(
  document: string,
): { operations: Operation[]; fragments: Map<string, Selection[]> } | undefined {
  const tokens = [...tokensOf(document)];
  let i = 0;
  const is = (value: string) => {
    const token = tokens[i];
    return (token?.kind === 'name' || token?.kind === 'punctuator') && token.value === value;
  };
  const skip = (value: string) => {
    if (!is(value)) throw new Unreadable();
    i++;
  };
  const nameToken = (): string => {
    const token = tokens[i++];
    if (token?.kind !== 'name') throw new Unreadable();
    return token.value;
  };
  const value = (): Value => {
    const token = tokens[i];
    if (is('$')) {
      i++;
      return { kind: 'variable', name: nameToken() };
    }
    if (is('[') || is('{')) {
      const close = is('[') ? ']' : '}';
      const object = close === '}';
      i++;
      while (!is(close)) {
        if (object) {
          nameToken();
          skip(':');
        }
        value();
      }
      i++;
      return { kind: 'literal' };
    }
    i++;
    if (token?.kind === 'name') return token.value === 'null' ? { kind: 'null' } : { kind: 'literal' };
    if (token?.kind === 'string' || token?.kind === 'number') return { kind: 'literal' };
    throw new Unreadable();
  };
  const args = (): Map<string, Value> => {
    const map = new Map<string, Value>();
    if (!is('(')) return map;
    i++;
    while (!is(')')) {
      const argument = nameToken();
      skip(':');
      map.set(argument, value());
    }
    i++;
    return map;
  };
  const directives = () => {
    while (is('@')) {
      i++;
      nameToken();
      args();
    }
  };
  const type = () => {
    if (is('[')) {
      i++;
      type();
      skip(']');
    } else {
      nameToken();
    }
    if (is('!')) i++;
  };
  const selectionSet = (): Selection[] => {
    skip('{');
    const selections: Selection[] = [];
    while (!is('}')) {
      if (is('...')) {
        i++;
        if (is('on')) {
          i++;
          nameToken();
        }
        if (is('{') || is('@')) {
          directives();
          selections.push({ kind: 'inline', selections: selectionSet() });
        } else {
          selections.push({ kind: 'spread', name: nameToken() });
          directives();
        }
        continue;
      }
      let field = nameToken();
      if (is(':')) {
        i++;
        field = nameToken();
      }
      selections.push({ kind: 'field', name: field, args: args() });
      directives();
      if (is('{')) selectionSet();
    }
    i++;
    return selections;
  };

  const operations: Operation[] = [];
  const fragments = new Map<string, Selection[]>();
  try {
    while (i < tokens.length) {
      if (is('{')) {
        operations.push({ defaults: new Map(), selections: selectionSet() });
        continue;
      }
      const keyword = nameToken();
      if (keyword === 'fragment') {
        const fragment = nameToken();
        skip('on');
        nameToken();
        directives();
        fragments.set(fragment, selectionSet());
        continue;
      }
      if (keyword !== 'query' && keyword !== 'mutation' && keyword !== 'subscription') throw new Unreadable();
      const name = tokens[i]?.kind === 'name' ? nameToken() : undefined;
      const defaults = new Map<string, Value>();
      if (is('(')) {
        i++;
        while (!is(')')) {
          skip('$');
          const variable = nameToken();
          skip(':');
          type();
          if (is('=')) {
            i++;
            defaults.set(variable, value());
          }
          directives();
        }
        i++;
      }
      directives();
      operations.push({ name, defaults, selections: selectionSet() });
    }
  } catch (error) {
    if (error instanceof Unreadable) return undefined;
    throw error;
  }
  return { operations, fragments };
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
