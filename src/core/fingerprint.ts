import { createHash } from 'node:crypto';
import { types } from 'node:util';
import canonicalize from 'canonicalize';
import { IdempotencyInputError } from './errors.js';

/** Limits on what `fingerprint` accepts. */
export interface FingerprintOptions {
  /**
   * Deepest nesting of objects, arrays, maps and sets accepted. Deeper inputs get
   * `IDEMPOTENCY_INPUT_UNSUPPORTED` instead of a stack overflow.
   * @default 64
   */
  maxDepth?: number;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * The sha256 (hex) of the RFC 8785 canonical form of `{ operation, input }`.
 *
 * Non-JSON values carry a type tag (`{"$date": …}`, `{"$bigint": …}`, `{"$map": …}`, typed arrays,
 * `FormData`, class instances with their class name, …) and object keys that start with `$` are
 * escaped with one more `$`, so no input can forge a tag: a Date never equals its ISO string, `1`
 * never equals `"1"`, `null` never equals a missing member. Object key order does not matter;
 * `undefined` members are dropped, as JSON does. Values that cannot be told apart synchronously
 * (a `Blob` or `File`, an object with no fields of its own) are refused.
 */
export function fingerprint(operation: string, input: unknown, options: FingerprintOptions = {}): string {
  const canonical = canonicalJson(operation, input, options);
  return createHash('sha256').update(canonical).digest('hex');
}

/** The canonical text `fingerprint` hashes; exposed for debugging a mismatch. */
export function canonicalJson(operation: string, input: unknown, options: FingerprintOptions = {}): string {
  const tagged = toTagged(input, options.maxDepth ?? 64, 0, new Set());
  try {
    // `canonicalize` returns undefined only for undefined input; ours is always an object.
    return canonicalize({ operation, input: tagged }) as string;
  } catch (cause) {
    // RFC 8785 refuses strings with lone UTF-16 surrogates.
    throw new IdempotencyInputError(`Cannot canonicalize the input: ${(cause as Error).message}`, { cause });
  }
}

function toTagged(value: unknown, maxDepth: number, depth: number, ancestors: Set<object>): Json {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      return Number.isFinite(value) ? value : { $number: String(value) };
    case 'bigint':
      return { $bigint: value.toString() };
    case 'undefined':
      return { $undefined: true };
    case 'function':
    case 'symbol':
      throw new IdempotencyInputError(`Cannot fingerprint a ${typeof value}`);
  }
  if (value === null) return null;
  const object = value as object;
  if (object instanceof Date) {
    return { $date: Number.isNaN(object.getTime()) ? 'invalid' : object.toISOString() };
  }
  if (object instanceof Uint8Array) return { $bytes: base64(object) };
  if (ArrayBuffer.isView(object)) return { $view: [object.constructor.name, base64(object)] };
  if (object instanceof ArrayBuffer) return { $arrayBuffer: base64(new Uint8Array(object)) };
  if (isDecimal(object)) return { $decimal: object.toString() };
  if (object instanceof RegExp) return { $regexp: String(object) };
  if (object instanceof Error || Object.prototype.toString.call(object) === '[object Error]') {
    // Its message, stack and cause are not enumerable: two errors that differ only there would
    // look the same, and an error's own fields are rarely all of its meaning.
    throw new IdempotencyInputError(
      `Cannot fingerprint an Error (${nameOf(object)}): pass the fields the mutation needs, e.g. { message: error.message }`,
    );
  }
  if (typeof Blob !== 'undefined' && object instanceof Blob) {
    // Its content can only be read asynchronously.
    throw new IdempotencyInputError(
      'Cannot fingerprint a Blob or File: key the upload by a hash of its content instead',
    );
  }

  if (depth >= maxDepth) {
    throw new IdempotencyInputError(`The input is nested deeper than ${maxDepth} levels`);
  }
  if (ancestors.has(object)) throw new IdempotencyInputError('The input contains a circular reference');
  ancestors.add(object);
  const child = (v: unknown) => toTagged(v, maxDepth, depth + 1, ancestors);
  let tagged: Json;
  if (Array.isArray(object)) {
    tagged = Array.from(object, child); // a hole counts as undefined
  } else if (typeof FormData !== 'undefined' && object instanceof FormData) {
    tagged = { $formData: [...object].map(([name, entry]) => [name, child(entry)]) };
  } else if (object instanceof Map) {
    tagged = { $map: sortByCanonical([...object].map(([k, v]) => [child(k), child(v)])) };
  } else if (object instanceof Set) {
    tagged = { $set: sortByCanonical([...object].map((v) => [child(v)])).map(([v]) => v as Json) };
  } else if (typeof (object as { toJSON?: unknown }).toJSON === 'function') {
    tagged = child((object as { toJSON(): unknown }).toJSON());
  } else {
    // A null-prototype object: `__proto__` and `constructor` keys are plain members here.
    const members: { [key: string]: Json } = Object.create(null);
    for (const key of Object.keys(object)) {
      const member = (object as Record<string, unknown>)[key];
      if (member === undefined) continue;
      members[key.startsWith('$') ? `$${key}` : key] = child(member);
    }
    const prototype = Object.getPrototypeOf(object);
    if (prototype === Object.prototype || prototype === null) {
      tagged = members;
    } else {
      // An instance of a class (a custom scalar's value, say): its class and its own fields.
      refuseHiddenState(object);
      tagged = { $instance: [object.constructor?.name ?? '', members] };
    }
  }
  ancestors.delete(object);
  return tagged;
}

/**
 * Refuses an object whose own enumerable fields are not all of its state, since two of them could
 * differ only in what the fingerprint does not see: a built-in or host object that keeps its state in
 * internal slots (a boxed primitive, URLSearchParams, Headers, a Promise, a WeakMap…, which name
 * themselves with `Symbol.toStringTag`), an object with non-enumerable or symbol-keyed fields of its
 * own, and one with no fields at all (private `#fields` only). Fields kept in `#private` slots next
 * to enumerable ones cannot be detected; such a class needs a `toJSON()`.
 */
function refuseHiddenState(object: object): void {
  const name = nameOf(object);
  if (types.isBoxedPrimitive(object)) {
    throw new IdempotencyInputError(
      `Cannot fingerprint a boxed primitive (new ${name}(…)): pass the primitive itself`,
    );
  }
  if (Object.prototype.toString.call(object) !== '[object Object]') {
    throw new IdempotencyInputError(
      `Cannot fingerprint a ${name}: its state is internal, not fields of its own; convert it to plain data or give it a toJSON()`,
    );
  }
  const fields = Object.keys(object).length;
  if (fields === 0) {
    throw new IdempotencyInputError(
      `Cannot fingerprint a ${name} without fields of its own: give it a toJSON()`,
    );
  }
  if (
    Object.getOwnPropertyNames(object).length !== fields ||
    Object.getOwnPropertySymbols(object).length > 0
  ) {
    throw new IdempotencyInputError(
      `Cannot fingerprint a ${name} with non-enumerable or symbol-keyed fields: they would not be part of the fingerprint; give it a toJSON()`,
    );
  }
}

/** A readable name for the value in an error message. */
function nameOf(object: object): string {
  const name = (object as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== '' ? name : Object.prototype.toString.call(object).slice(8, -1);
}

function base64(view: ArrayBufferView): string {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64');
}

/** Map entries and Set members have no order of their own: order them by their canonical text. */
function sortByCanonical(entries: Json[][]): Json[][] {
  return entries
    .map((entry) => [canonicalize(entry) as string, entry] as const)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([, entry]) => entry);
}

/** The fields decimal.js (and so Prisma's `Decimal`) instances carry. */
export interface DecimalLike {
  d: number[];
  e: number;
  s: number;
  toFixed(): string;
}

/** Prisma's `Decimal` (and decimal.js instances) without importing either. */
export function isDecimal(value: object): value is DecimalLike {
  const candidate = value as { d?: unknown; e?: unknown; s?: unknown; toFixed?: unknown };
  return (
    Array.isArray(candidate.d) &&
    typeof candidate.e === 'number' &&
    typeof candidate.s === 'number' &&
    typeof candidate.toFixed === 'function'
  );
}
