import { hash } from 'node:crypto';
import { types } from 'node:util';
import { IdempotencyInputError } from './errors.js';

/** Limits on what `fingerprint` accepts. */
export interface FingerprintOptions {
  /**
   * Deepest nesting of objects, arrays, maps and sets accepted, an integer from 1 to
   * `MAX_FINGERPRINT_DEPTH` (1,000). Deeper inputs, and circular ones, get
   * `IDEMPOTENCY_INPUT_UNSUPPORTED` instead of a stack overflow.
   * @default 64
   */
  maxDepth?: number | undefined;
  /**
   * Longest input accepted, in characters of the canonical text that is hashed (about its size in
   * bytes as JSON, for ASCII text), an integer from 1 to `MAX_FINGERPRINT_LENGTH` (100,000,000). An
   * object found in several places counts at each: a few kilobytes that name one list a thousand
   * times are a long input. Longer inputs get `IDEMPOTENCY_INPUT_UNSUPPORTED` instead of taking the
   * server's memory.
   * @default 1_048_576
   */
  maxLength?: number | undefined;
}

/**
 * The sha256 (hex) of the RFC 8785 canonical form of `{ operation, input }`.
 *
 * Non-JSON values carry a type tag (`{"$date": …}`, `{"$bigint": …}`, `{"$map": …}`, typed arrays,
 * `FormData`, …) and object keys that start with `$` are escaped with one more `$`, so no input can
 * forge a tag: a Date never equals its ISO string, `1` never equals `"1"`, `null` never equals a
 * missing member, `-0` never equals `0` (a Decimal compares by value: `-0` and `0`, `1.50` and `1.5`
 * are equal). Object key order does not matter; `undefined` members are dropped, as JSON does, and
 * so are a plain object's symbol-keyed and non-enumerable members; an array's hole counts as
 * `undefined`; an enumerable getter counts as the value it returns. A RegExp is its source and flags
 * (not `lastIndex`), a typed array its element type and bytes.
 *
 * No class name enters the hash, so a rename or a minifier does not change a fingerprint. Built-in
 * values are recognized by their internal slots (a subclass of `Map` or `Date`, or a value from
 * another realm, hashes like the built-in); Prisma's `Decimal` by its fields and methods. An instance
 * of any other class hashes as its own enumerable fields, exactly like a plain object with the same
 * fields (as JSON, superjson and `structuredClone` see it), or as what its `toJSON()` returns.
 *
 * Refused with `IDEMPOTENCY_INPUT_UNSUPPORTED`, because two different values would hash alike:
 * - an `Error` (its message is not an enumerable field), a `Blob` or `File` (readable only
 *   asynchronously);
 * - boxed primitives, and objects that name themselves with `Symbol.toStringTag` without being a
 *   tagged type or having a `toJSON()` (built-ins whose state is internal: `URLSearchParams`,
 *   `Headers`, `Promise`, `WeakMap`…);
 * - a Date, Map, Set, RegExp, ArrayBuffer, DataView or FormData that carries fields of its own;
 * - a class instance with no enumerable fields, or with non-enumerable or symbol-keyed ones.
 * State a class keeps in `#private` fields next to enumerable ones cannot be detected: give such a
 * class a `toJSON()`.
 */
export function fingerprint(operation: string, input: unknown, options: FingerprintOptions = {}): string {
  // The one-shot hash (Node 20.12+) builds no Hash object: half a microsecond of a small input's four.
  return hash('sha256', canonicalJson(operation, input, options), 'hex');
}

/** The deepest `maxDepth` accepted: well within Node's stack, whatever the input. */
const MAX_FINGERPRINT_DEPTH = 1_000;
/**
 * The longest `maxLength` accepted: the text counted is within twice the text written (a bracket
 * counts for its pair), which must stay well within the longest string V8 makes (about 2^29
 * characters).
 */
const MAX_FINGERPRINT_LENGTH = 100_000_000;

/** The canonical text `fingerprint` hashes; exposed for debugging a mismatch. */
export function canonicalJson(operation: string, input: unknown, options: FingerprintOptions = {}): string {
  const { maxDepth = 64, maxLength = 1_048_576 } = options;
  // A cycle is found only at `maxDepth` (see `tooDeep`): deeper than the stack goes, it would
  // overflow it first.
  if (!Number.isInteger(maxDepth) || maxDepth < 1 || maxDepth > MAX_FINGERPRINT_DEPTH) {
    throw new RangeError(`fingerprintOptions.maxDepth must be an integer from 1 to ${MAX_FINGERPRINT_DEPTH}`);
  }
  if (!Number.isInteger(maxLength) || maxLength < 1 || maxLength > MAX_FINGERPRINT_LENGTH) {
    throw new RangeError(
      `fingerprintOptions.maxLength must be an integer from 1 to ${MAX_FINGERPRINT_LENGTH}`,
    );
  }
  // RFC 8785 orders members by their UTF-16 code units: "input" before "operation".
  const canonical = new CanonicalWriter(maxDepth, maxLength);
  return `{"input":${canonical.value(input, 0)},"operation":${quoted(operation)}}`;
}

/**
 * Writes the RFC 8785 canonical JSON of a value's tagged form in one pass: members sorted by
 * their UTF-16 code units, numbers and strings as `JSON.stringify` writes them (what RFC 8785
 * specifies), strings with a lone surrogate refused.
 */
class CanonicalWriter {
  /** The containers around the one being written: `ancestors[d]` at depth `d`. */
  private readonly ancestors: object[] = [];
  /** Like `recentMembers`, for the objects whose members are not kept from one call to the next. */
  private readonly wideMembers: Members[][] = [];
  /** What `maxLength` leaves of the text: its values and member names, and a character a container. */
  private left: number;

  constructor(
    private readonly maxDepth: number,
    private readonly maxLength: number,
  ) {
    this.left = maxLength;
  }

  value(value: unknown, depth: number): string {
    switch (typeof value) {
      case 'string':
        return this.spent(quoted(value));
      case 'boolean':
        return this.spent(value ? 'true' : 'false');
      case 'number':
        return this.spent(numberText(value));
      case 'bigint':
        return this.spent(`{"$bigint":"${value.toString()}"}`);
      case 'undefined':
        return this.spent('{"$undefined":true}');
      case 'function':
      case 'symbol':
        throw new IdempotencyInputError(`Cannot fingerprint a ${typeof value}`);
    }
    if (value === null) return this.spent('null');
    const object = value as object;
    const prototype = Object.getPrototypeOf(object);
    // Data as JSON.parse or a validator builds it skips every check for the tagged types.
    const plain = prototype === Object.prototype || prototype === null || Array.isArray(object);
    if (!plain) {
      const tagged = this.builtIn(object);
      if (tagged !== undefined) return this.spent(tagged);
    }

    if (depth >= this.maxDepth) throw this.tooDeep(object, depth);
    this.spent('{');
    this.ancestors[depth] = object;
    let text: string;
    if (Array.isArray(object)) {
      text = this.array(object, depth + 1); // a hole counts as undefined
    } else if (plain) {
      text = hasToJSON(object) ? this.value(toJSON(object), depth + 1) : this.fields(object, depth + 1);
    } else {
      text = this.container(object, depth + 1);
    }
    return text;
  }

  /** `text`, counted against `maxLength`. */
  private spent(text: string): string {
    this.charge(text.length);
    return text;
  }

  /** Counts `characters` against `maxLength`. */
  private charge(characters: number): void {
    this.left -= characters;
    if (this.left < 0) {
      throw new IdempotencyInputError(
        `The input is longer than ${this.maxLength} characters as canonical JSON (fingerprintOptions.maxLength), an object found in several places counted at each`,
      );
    }
  }

  /**
   * Too deep, or circular: a cycle is only looked for here, where any cycle ends up, so that the
   * containers of an input that has none cost no bookkeeping but one assignment.
   */
  private tooDeep(object: object, depth: number): IdempotencyInputError {
    const ancestors = this.ancestors.slice(0, depth);
    const circular = ancestors.includes(object) || new Set(ancestors).size < ancestors.length;
    return new IdempotencyInputError(
      circular
        ? 'The input contains a circular reference'
        : `The input is nested deeper than ${this.maxDepth} levels`,
    );
  }

  private array(values: ArrayLike<unknown>, depth: number): string {
    this.charge(values.length); // the commas, and the work of each member
    let text = '[';
    for (let i = 0; i < values.length; i++) {
      if (i > 0) text += ',';
      text += this.value(values[i], depth);
    }
    return `${text}]`;
  }

  /** Own enumerable string-keyed members, in canonical order (see `Members`); `undefined` ones left out. */
  private fields(object: object, depth: number): string {
    const keys = Object.keys(object);
    // A key read costs work whether its member is written or not (`undefined` is not).
    this.charge(keys.length);
    const members = this.membersOf(keys, depth);
    let text = '{';
    for (let i = 0; i < members.sorted.length; i++) {
      // Read one by one, in canonical order, between writes: a getter's side effects then happen
      // as they always did, so the text stays what earlier versions wrote for any input.
      const member = (object as Record<string, unknown>)[members.sorted[i]!];
      if (member === undefined) continue;
      // Appended piece by piece: a template would first join the pieces into a string of their own.
      text += this.spent(members.name(i, text.length > 1));
      text += this.value(member, depth);
    }
    return `${text}}`;
  }

  /**
   * The members of an object with these keys. The objects at one depth mostly have one of a few
   * sets of keys in the same order (the rows of an array, of one shape or a few; the inputs of one
   * mutation, call after call), so the last few are kept for each depth, their keys sorted and their
   * names quoted, and reused while the keys match: sorting and quoting them again took a third of
   * the time of a list of rows, and about 13 µs of a small input's fingerprint in a server
   * (`npm run bench:versus`), where they are kept from one call to the next.
   */
  private membersOf(keys: string[], depth: number): Members {
    const shared = listAt(recentMembers, depth);
    for (const members of shared) if (sameKeys(members.keys, keys)) return members;
    const own = listAt(this.wideMembers, depth);
    for (const members of own) if (sameKeys(members.keys, keys)) return members;
    const members = new Members(keys);
    const recent = keptAcrossCalls(keys) ? shared : own;
    if (recent.length === RECENT_MEMBERS) recent.pop();
    recent.unshift(members);
    return members;
  }

  /**
   * The tag of a built-in value with no children, `undefined` for anything else. Built-ins are
   * told by their internal slots (`util.types`, the typed arrays' own tag), never by a class name,
   * so subclasses and values from another realm hash like the built-in itself.
   */
  private builtIn(object: object): string | undefined {
    const tag = taggedBuiltIn(object);
    return tag === undefined ? undefined : this.tagged(tag);
  }

  /** A tag whose value holds only strings (and arrays of them). */
  private tagged([name, value]: BuiltInTag): string {
    const text = typeof value === 'string' ? quoted(value) : `[${value.map(quoted).join(',')}]`;
    return `{"${name}":${text}}`;
  }

  /** A non-plain object with children: a built-in collection, or a class instance as its own data. */
  private container(object: object, depth: number): string {
    if (typeof FormData !== 'undefined' && object instanceof FormData) {
      refuseOwnFields(object);
      this.charge(16);
      const entries = [...object].map(
        ([name, entry]) => `[${this.spent(quoted(name))},${this.value(entry, depth)}]`,
      );
      return `{"$formData":[${entries.join(',')}]}`;
    }
    if (types.isMap(object)) {
      refuseOwnFields(object);
      this.charge(10); // {"$map":[]}, and each entry's brackets and commas
      const entries = Array.from(Map.prototype.entries.call(object), ([k, v]) => {
        this.charge(3);
        return `[${this.value(k, depth)},${this.value(v, depth)}]`;
      });
      return `{"$map":[${sortedTexts(entries).join(',')}]}`;
    }
    if (types.isSet(object)) {
      refuseOwnFields(object);
      // Ordered by the canonical text of each member wrapped in an array, as the tag always was.
      this.charge(10); // {"$set":[]}, and each member's comma
      const members = Array.from(Set.prototype.values.call(object), (v) => {
        this.charge(1);
        return `[${this.value(v, depth)}]`;
      });
      return `{"$set":[${sortedTexts(members)
        .map((member) => member.slice(1, -1))
        .join(',')}]}`;
    }
    if (hasToJSON(object)) return this.value(toJSON(object), depth);
    // A class instance hashes as its own fields, like a plain object with the same fields: class
    // names change with a rename or a minifier, and a retry spanning that deploy must still match.
    // A plain object from another realm (a `vm` context) has a prototype whose prototype is null.
    if (Object.getPrototypeOf(Object.getPrototypeOf(object)) !== null) refuseHiddenState(object);
    return this.fields(object, depth);
  }
}

/**
 * An object's keys in canonical order (by UTF-16 code units, which is what `sort()` compares), and
 * each one's quoted name with its colon (and with a comma before it, for a member after another).
 * User keys starting with `$` get one more, so no tag can be forged (which keeps their order: the
 * sort can run on the keys as they are). A name is quoted when its member is first written, so a
 * key with a lone surrogate is refused exactly when each object sorted and quoted its own keys: only
 * if its member is not `undefined`, after the members before it.
 */
class Members {
  readonly sorted: string[];
  private readonly names: string[] = [];
  /** The names with a comma before them, for every member but the first written. */
  private readonly laterNames: string[] = [];

  constructor(readonly keys: string[]) {
    this.sorted = keys.slice().sort();
  }

  /** `"name":`, or `,"name":` after another member, quoted when first asked for. */
  name(index: number, later: boolean): string {
    const names = later ? this.laterNames : this.names;
    let name = names[index];
    if (name === undefined) {
      const key = this.sorted[index]!;
      name = `${later ? ',' : ''}${quoted(key.startsWith('$') ? `$${key}` : key)}:`;
      names[index] = name;
    }
    return name;
  }
}

/**
 * The members of the last objects written at each depth, latest first, kept from one fingerprint to
 * the next (see `CanonicalWriter.membersOf`). Only a cache: an object being written holds its own
 * `Members`, so one dropped from here meanwhile (by a getter that fingerprints something else) is
 * still whole.
 */
const recentMembers: Members[][] = [];
/** How many sets of keys `membersOf` keeps for each depth. */
const RECENT_MEMBERS = 4;
/**
 * Whether the members of an object with these keys are kept from one call to the next: not those of
 * an object with many keys, or long ones, which is rarely met again and would keep its names in
 * memory (at most `RECENT_MEMBERS` sets of 64 keys of 4,096 characters in all, per depth).
 */
function keptAcrossCalls(keys: string[]): boolean {
  if (keys.length > 64) return false;
  let characters = 0;
  for (const key of keys) characters += key.length;
  return characters <= 4_096;
}

/** The list at `depth`, made empty the first time. */
function listAt(lists: Members[][], depth: number): Members[] {
  let list = lists[depth];
  if (list === undefined) {
    list = [];
    lists[depth] = list;
  }
  return list;
}

function sameKeys(a: string[], b: string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A string as JSON writes it; one with a lone surrogate is refused. */
function quoted(text: string): string {
  // Most strings need no escape and hold no surrogate: quoting them is all JSON would do. A loop
  // looks through a short string faster than a regular expression can start.
  if (!(text.length < 16 ? needsCare(text) : NEEDS_CARE.test(text))) return `"${text}"`;
  if (LONE_SURROGATE.test(text)) {
    throw new IdempotencyInputError('Cannot canonicalize the input: a string holds a lone UTF-16 surrogate');
  }
  return JSON.stringify(text);
}

/** A number as JSON writes it, or its tag: -0, NaN and ±Infinity have none in JSON. */
function numberText(value: number): string {
  // JSON writes -0 as 0; JavaScript tells them apart (1 / -0 is -Infinity), so it gets a tag.
  if (Object.is(value, -0)) return '{"$number":"-0"}';
  // JSON writes a finite number as String() does. V8 keeps the text of small integers at hand, so
  // String() is the faster for them, and JSON.stringify() for the others (about 2/3 of the time).
  if ((value | 0) === value) return String(value);
  return Number.isFinite(value) ? JSON.stringify(value) : `{"$number":"${String(value)}"}`;
}

/** Whether `text` holds what `NEEDS_CARE` matches. */
function needsCare(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0x20 || unit === 0x22 || unit === 0x5c || (unit >= 0xd800 && unit <= 0xdfff)) return true;
  }
  return false;
}

/** With the `u` flag a surrogate pair is one code point, so `\p{Cs}` matches only a lone surrogate. */
const LONE_SURROGATE = /\p{Cs}/u;
/** What JSON escapes, and any surrogate (a pair is fine, a lone one is refused). */
const NEEDS_CARE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** A built-in value's tag: its name and its value as text (or a list of texts). */
type BuiltInTag = [name: string, value: string | string[]];

/** The tag of a built-in value with no children (see `CanonicalWriter.builtIn`). */
function taggedBuiltIn(object: object): BuiltInTag | undefined {
  if (types.isDate(object)) {
    refuseOwnFields(object);
    const time = Date.prototype.getTime.call(object);
    return ['$date', Number.isNaN(time) ? 'invalid' : Date.prototype.toISOString.call(object)];
  }
  if (ArrayBuffer.isView(object)) {
    const name = typedArrayName.call(object); // undefined for a DataView
    if (name === 'Uint8Array') return ['$bytes', base64(object)]; // a Buffer too
    // A typed array's elements are its own keys; listing them to find others would cost O(length).
    if (name === undefined) refuseOwnFields(object);
    return ['$view', [name ?? 'DataView', base64(object)]];
  }
  if (types.isArrayBuffer(object)) {
    refuseOwnFields(object);
    return ['$arrayBuffer', base64(new Uint8Array(object))];
  }
  if (isDecimal(object)) {
    refuseOwnFields(object, DECIMAL_FIELDS);
    return ['$decimal', object.toString()];
  }
  if (types.isRegExp(object)) {
    // Source and flags; `lastIndex` is where the last match stopped, not part of the pattern.
    refuseOwnFields(object);
    return ['$regexp', RegExp.prototype.toString.call(object)];
  }
  if (object instanceof Error || Object.prototype.toString.call(object) === '[object Error]') {
    // Its message, stack and cause are not enumerable: two errors that differ only there would
    // look the same, and an error's own fields are rarely all of its meaning.
    throw new IdempotencyInputError(
      `Cannot fingerprint an Error (${nameOf(object)}): pass the fields the mutation needs, e.g. { message: error.message }`,
    );
  }
  if (isBlobLike(object)) {
    // Its content can only be read asynchronously.
    throw new IdempotencyInputError(
      'Cannot fingerprint a Blob or File: key the upload by a hash of its content instead',
    );
  }
  return undefined;
}

/**
 * A Blob or File: this realm's, or one of another class with its shape, as Yoga hands resolvers
 * (`@whatwg-node/node-fetch`'s), whose own fields would hash its `lastModified`, the moment the
 * server read the upload, so a retry of the same file would never match.
 */
function isBlobLike(object: object): boolean {
  if (typeof Blob !== 'undefined' && object instanceof Blob) return true;
  const blob = object as {
    arrayBuffer?: unknown;
    stream?: unknown;
    slice?: unknown;
    size?: unknown;
    type?: unknown;
  };
  return (
    typeof blob.arrayBuffer === 'function' &&
    typeof blob.stream === 'function' &&
    typeof blob.slice === 'function' &&
    typeof blob.size === 'number' &&
    typeof blob.type === 'string'
  );
}

function hasToJSON(object: object): object is { toJSON(): unknown } {
  return typeof (object as { toJSON?: unknown }).toJSON === 'function';
}

function toJSON(object: { toJSON(): unknown }): unknown {
  try {
    return object.toJSON();
  } catch (cause) {
    // E.g. an object that inherits Date.prototype.toJSON without being a Date.
    throw new IdempotencyInputError(`Cannot fingerprint a ${nameOf(object)}: its toJSON() threw`, { cause });
  }
}

/** The `Symbol.toStringTag` getter every typed array inherits: its element type, whatever its class. */
const typedArrayName = Object.getOwnPropertyDescriptor(
  Object.getPrototypeOf(Uint8Array.prototype),
  Symbol.toStringTag,
)?.get as (this: ArrayBufferView) => string | undefined;

/**
 * Refuses an object whose own enumerable fields are not all of its state, since two of them could
 * differ only in what the fingerprint does not see: a built-in or host object that keeps its state in
 * internal slots (a boxed primitive, URLSearchParams, Headers, a Promise, a WeakMap…, which name
 * themselves with `Symbol.toStringTag`), an object with non-enumerable or symbol-keyed fields of its
 * own, and one with no fields at all (private `#fields` only). Fields kept in `#private` slots next
 * to enumerable ones cannot be detected; such a class needs a `toJSON()`.
 */
function refuseHiddenState(object: object): void {
  if (types.isBoxedPrimitive(object)) {
    throw new IdempotencyInputError(
      `Cannot fingerprint a boxed primitive (new ${nameOf(object)}(…)): pass the primitive itself`,
    );
  }
  if (Object.prototype.toString.call(object) !== '[object Object]') {
    throw new IdempotencyInputError(
      `Cannot fingerprint a ${nameOf(object)}: its state is internal, not fields of its own; convert it to plain data or give it a toJSON()`,
    );
  }
  const enumerable = Object.keys(object).length;
  if (enumerable === 0) {
    throw new IdempotencyInputError(
      `Cannot fingerprint a ${nameOf(object)} without fields of its own: give it a toJSON()`,
    );
  }
  if (
    Object.getOwnPropertyNames(object).length !== enumerable ||
    Object.getOwnPropertySymbols(object).length > 0
  ) {
    throw new IdempotencyInputError(
      `Cannot fingerprint a ${nameOf(object)} with non-enumerable or symbol-keyed fields: they would not be part of the fingerprint; give it a toJSON()`,
    );
  }
}

/**
 * Refuses a built-in value that also carries fields of its own (`Object.assign(new Date(), { tz })`,
 * a subclass of Map with a field): its tag holds only the built-in's value, so they would be lost.
 */
function refuseOwnFields(object: object, allowed?: ReadonlySet<string>): void {
  const keys = allowed ? Object.keys(object).filter((key) => !allowed.has(key)) : Object.keys(object);
  if (keys.length > 0) {
    throw new IdempotencyInputError(
      `Cannot fingerprint a ${nameOf(object)} with fields of its own (${keys.slice(0, 3).join(', ')}): only its value would count; pass the fields separately`,
    );
  }
}

/** A readable name for the value in an error message. */
function nameOf(object: object): string {
  const name = (object as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== '' ? name : Object.prototype.toString.call(object).slice(8, -1);
}

/** A view's bytes (only those it sees) in base64. */
export function base64(view: ArrayBufferView): string {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64');
}

/** Map entries and Set members have no order of their own: order them by their canonical text. */
function sortedTexts(texts: string[]): string[] {
  return texts.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** The own fields of every decimal.js instance: any other (a subclass's `currency`) is refused. */
const DECIMAL_FIELDS: ReadonlySet<string> = new Set(['constructor', 's', 'e', 'd']);

/** The fields decimal.js (and so Prisma's `Decimal`) instances carry. */
export interface DecimalLike {
  /** The digits; `null` for NaN and ±Infinity. */
  d: number[] | null;
  e: number;
  s: number;
  toFixed(): string;
}

/** Prisma's `Decimal` (and decimal.js instances, NaN and ±Infinity included) without importing either. */
export function isDecimal(value: object): value is DecimalLike {
  const candidate = value as { d?: unknown; e?: unknown; s?: unknown; toFixed?: unknown };
  return (
    (Array.isArray(candidate.d) || candidate.d === null) &&
    typeof candidate.e === 'number' &&
    typeof candidate.s === 'number' &&
    typeof candidate.toFixed === 'function'
  );
}
