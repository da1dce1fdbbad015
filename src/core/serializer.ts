import { SuperJSON } from 'superjson';
import { base64, type DecimalLike, isDecimal } from './fingerprint.js';

/** Turns a result into the text stored with the record, and back for a replay. */
export interface Serializer {
  serialize(value: unknown): string;
  deserialize(text: string): unknown;
  /**
   * `serialize(value)` when `deserialize` is known to give back a value equal to `value` without
   * trying it (plain JSON data, Dates and Decimals, for the default serializer): that text is
   * stored without being read back first. `undefined` for any other value.
   * @default every result is serialized, then read back before it is stored
   */
  serializeKnown?(value: unknown): string | undefined;
}

/** A constructor of arbitrary-precision decimals, such as Prisma's `Prisma.Decimal`. */
export type DecimalConstructor = new (value: string) => unknown;

/**
 * The default serializer: superjson, so Date, BigInt, Map, Set, undefined, RegExp, typed arrays
 * (NaN, ±Infinity and -0 in float ones too), Buffers, ArrayBuffers and DataViews come back as they
 * went in (instances of other classes come back as plain objects of what JSON writes of them, a
 * function member is dropped, and what superjson would bring back as another value, an invalid
 * Date, a Set member reached elsewhere too, is refused; an `Error` as an `Error` with its name,
 * message, cause and own enumerable fields, without its class or stack), arrays with their holes.
 * Decimals come back as instances of `Decimal` (the Prisma store passes Prisma's), `-0` included;
 * without it a Decimal in a result fails the mutation before anything commits, rather than
 * replaying as a different type.
 */
export function superjsonSerializer(options: { Decimal?: DecimalConstructor } = {}): Serializer {
  const { Decimal } = options;
  const superjson = new SuperJSON();
  superjson.registerCustom<DecimalLike, string>(
    {
      isApplicable: (value): value is DecimalLike =>
        typeof value === 'object' && value !== null && isDecimal(value),
      serialize: (value) => {
        if (!Decimal) {
          throw new TypeError(
            'The result contains a Decimal but the serializer has no Decimal class: use superjsonSerializer({ Decimal })',
          );
        }
        return decimalText(value);
      },
      deserialize: (text) => {
        if (!Decimal) throw new TypeError('Cannot replay a Decimal: pass superjsonSerializer({ Decimal })');
        return new Decimal(text) as DecimalLike;
      },
    },
    'Decimal',
  );
  // superjson writes a float array's elements as JSON numbers: NaN and ±Infinity as null, -0 as 0.
  for (const FloatArray of [Float32Array, Float64Array]) {
    superjson.registerCustom<Float32Array | Float64Array, string>(
      {
        isApplicable: (value): value is Float32Array | Float64Array => value instanceof FloatArray,
        serialize: base64,
        deserialize: (text) => new FloatArray(arrayBufferOf(text)),
      },
      FloatArray.name,
    );
  }
  // superjson's walk skips an array's holes, so trailing ones would shorten it: an array with holes
  // is stored as its length and the members it has, at their indices (the paths superjson records
  // for an object reached twice go through them, and must lead to it in the array read back).
  superjson.registerCustom<unknown[], Walked>(
    {
      isApplicable: (value): value is unknown[] => Array.isArray(value) && hasHoles(value),
      serialize: (array) => {
        const stored: Record<string, unknown> = { length: array.length };
        array.forEach((member, i) => {
          stored[i] = member;
        });
        return stored as unknown as Walked;
      },
      deserialize: (stored) => {
        const { length, ...members } = stored as unknown as Record<string, unknown>;
        return Object.assign(new Array(length as number), members) as unknown[];
      },
    },
    'SparseArray',
  );
  // superjson's own rule brings an Error back with an enumerable `name` and without its own fields,
  // so JSON would answer a replay with { name } where the first call answered its fields.
  superjson.registerCustom<Error, Walked>(
    {
      isApplicable: (value): value is Error => value instanceof Error,
      // Its own fields where the Error read back has them (the paths superjson records for an
      // object reached twice go through them), and the rest under a name of ours.
      serialize: (error) => {
        if (Object.hasOwn(error, ERROR)) throw new TypeError(`an Error with a field named ${ERROR}`);
        const kept: StoredError = { name: error.name, message: error.message };
        if ('cause' in error) kept.cause = error.cause;
        return { ...error, [ERROR]: kept } as unknown as Walked;
      },
      deserialize: (stored) => {
        const { [ERROR]: kept, ...fields } = stored as unknown as Record<string, unknown>;
        const { name, message, cause } = kept as StoredError;
        // A field of its own stays one (enumerable), whatever the constructor would have made of it.
        const own = (field: string) => Object.hasOwn(fields, field);
        const error = new Error(
          own('message') ? undefined : message,
          Object.hasOwn(kept as object, 'cause') && !own('cause') ? { cause } : undefined,
        );
        if (name !== 'Error' && !own('name')) {
          Object.defineProperty(error, 'name', { value: name, writable: true, configurable: true });
        }
        return Object.assign(error, fields);
      },
    },
    'Error',
  );
  // superjson writes a Buffer as a typed array it cannot read back, and an ArrayBuffer as {}.
  superjson.registerCustom<Buffer, string>(
    {
      isApplicable: (value): value is Buffer => Buffer.isBuffer(value),
      serialize: (value) => value.toString('base64'),
      deserialize: (text) => Buffer.from(text, 'base64'),
    },
    'Buffer',
  );
  superjson.registerCustom<ArrayBuffer, string>(
    {
      isApplicable: (value): value is ArrayBuffer => value instanceof ArrayBuffer,
      serialize: (value) => Buffer.from(value).toString('base64'),
      deserialize: arrayBufferOf,
    },
    'ArrayBuffer',
  );
  superjson.registerCustom<DataView, string>(
    {
      isApplicable: (value): value is DataView => value instanceof DataView,
      serialize: (value) => Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64'),
      deserialize: (text) => new DataView(arrayBufferOf(text)),
    },
    'DataView',
  );
  // A row of plain data, Dates and Decimals needs none of superjson's walk: its text is what
  // superjson would write, and it reads back equal.
  const serializeKnown = (value: unknown): string | undefined => {
    const values = typedValues(value, Decimal);
    if (values === undefined) return undefined;
    const json = JSON.stringify(value);
    if (Object.keys(values).length === 0) return `{"json":${json}}`;
    return `{"json":${json},"meta":${JSON.stringify({ values, v: 1 })}}`;
  };
  return {
    serialize: (value) => {
      const known = serializeKnown(value);
      if (known !== undefined) return known;
      refuseUnreplayable(value, true);
      const serialized = superjson.serialize(value as Parameters<SuperJSON['serialize']>[0]);
      const text = JSON.stringify(serialized);
      // superjson brings an object reached twice back by its paths, and puts the wrong one back
      // where a path runs through a Set's member or a Map's key, or below an object it replaces
      // afterwards (superjson 2.2): such a value must read back equal.
      if (serialized.meta?.referentialEqualities !== undefined && !sameValue(value, superjson.parse(text))) {
        throw new TypeError(
          'it holds an object reached twice that superjson cannot bring back where it was (a Set member or a Map key found elsewhere too, or a path back to the result inside an object reached twice)',
        );
      }
      return text;
    },
    deserialize: (text) => superjson.parse(text),
    serializeKnown,
  };
}

/**
 * Refuses a value that superjson would write as another, wherever it would walk: a promise or a
 * stream (anything async iterable: an async generator, a `ReadableStream`), written as `{}`, so the
 * replay would not be the answer (and a streamed result's body would run only after the commit);
 * an invalid Date, read back as `null`; a function as the whole result (a member is dropped, as
 * JSON drops it).
 */
function refuseUnreplayable(value: unknown, atRoot: boolean, seen = new Set<object>()): void {
  if (atRoot && typeof value === 'function') throw new TypeError('it is a function');
  if (typeof value !== 'object' || value === null || seen.has(value) || ArrayBuffer.isView(value)) return;
  seen.add(value);
  if (typeof (value as { then?: unknown }).then === 'function' || Symbol.asyncIterator in value) {
    throw new TypeError('it holds a promise or a stream: await it (or collect the stream) in the resolver');
  }
  if (value instanceof Date && Number.isNaN(value.getTime())) {
    throw new TypeError('it holds an invalid Date, which would be replayed as null');
  }
  const members =
    value instanceof Map
      ? [...value.keys(), ...value.values()]
      : value instanceof Set
        ? [...value]
        : Object.values(value);
  for (const member of members) refuseUnreplayable(member, false, seen);
}

/**
 * Whether `copy`, a value read back, equals `value` as the serializer promises: the same
 * primitives (`-0` and `NaN` too), Dates, Decimals, bytes and RegExps; a Map or a Set (of a
 * subclass too) as one with equal members in the same order; an array with the same holes and equal
 * members at its indices; a plain object, or an Error, with equal own members (an Error's name,
 * message and cause too; a function member is dropped); an instance of another class as what JSON
 * writes of it. Objects reached twice need not be one object again, but a cycle must lead back the
 * same way.
 */
function sameValue(value: unknown, copy: unknown, pairs = new Map<object, Set<unknown>>()): boolean {
  if (Object.is(value, copy)) return true;
  if (typeof value !== 'object' || value === null) return false;
  const plain = (object: object) => {
    const prototype = Object.getPrototypeOf(object);
    return prototype === Object.prototype || prototype === null;
  };
  const ruled =
    plain(value) ||
    Array.isArray(value) ||
    value instanceof Date ||
    value instanceof RegExp ||
    value instanceof Map ||
    value instanceof Set ||
    value instanceof Error ||
    value instanceof ArrayBuffer ||
    ArrayBuffer.isView(value) ||
    isDecimal(value);
  if (!ruled) return JSON.stringify(value) === JSON.stringify(copy);
  if (typeof copy !== 'object' || copy === null) return false;
  // Compared already, or being compared (a cycle).
  const compared = pairs.get(value) ?? new Set<unknown>();
  if (compared.has(copy)) return true;
  pairs.set(value, compared.add(copy));
  const same = (a: unknown, b: unknown) => sameValue(a, b, pairs);
  const members = (a: object, b: object) => {
    const keys = Object.keys(a).filter((key) => typeof a[key as never] !== 'function');
    return (
      keys.length === Object.keys(b).length &&
      keys.every((key) => Object.hasOwn(b, key) && same(a[key as never], b[key as never]))
    );
  };
  if (value instanceof Date) return copy instanceof Date && Object.is(value.getTime(), copy.getTime());
  if (isDecimal(value)) return isDecimal(copy) && decimalText(value) === decimalText(copy);
  if (value instanceof RegExp) return copy instanceof RegExp && String(value) === String(copy);
  if (value instanceof ArrayBuffer || ArrayBuffer.isView(value)) {
    const bytes = (view: object) =>
      ArrayBuffer.isView(view)
        ? Buffer.from(view.buffer, view.byteOffset, view.byteLength)
        : Buffer.from(view as ArrayBuffer);
    return copy.constructor === value.constructor && bytes(value).equals(bytes(copy));
  }
  if (value instanceof Map || value instanceof Set) {
    if (!(value instanceof Map ? copy instanceof Map : copy instanceof Set)) return false;
    const theirs = [...(copy as Map<unknown, unknown>).entries()];
    return (
      value.size === theirs.length &&
      [...(value as Map<unknown, unknown>).entries()].every(
        ([key, member], i) => same(key, theirs[i]![0]) && same(member, theirs[i]![1]),
      )
    );
  }
  if (Array.isArray(value)) {
    // Its indices: other own fields (a match result's) are not kept.
    return (
      Array.isArray(copy) &&
      value.length === copy.length &&
      value.every((_, i) => i in copy) &&
      copy.every((_, i) => i in value) &&
      value.every((member, i) => typeof member === 'function' || same(member, copy[i]))
    );
  }
  if (value instanceof Error) {
    return (
      copy instanceof Error &&
      value.name === copy.name &&
      value.message === copy.message &&
      'cause' in value === 'cause' in copy &&
      same(value.cause, copy.cause) &&
      members(value, copy)
    );
  }
  return plain(copy) && members(value, copy);
}

/**
 * What superjson is told the rules for an array and an Error return: JSON. It walks what they
 * return, as it walks every container, so the members are written as any value is, Dates and all.
 */
type Walked = { [field: string]: string };

/** The bytes of a base64 text, in an ArrayBuffer of their own. */
function arrayBufferOf(text: string): ArrayBuffer {
  const bytes = Buffer.from(text, 'base64');
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
}

function hasHoles(array: unknown[]): boolean {
  for (let i = 0; i < array.length; i++) if (!(i in array)) return true;
  return false;
}

/** What is kept of an `Error` besides its own fields, stored beside them under `ERROR`. */
interface StoredError {
  name: string;
  message: string;
  cause?: unknown;
}
const ERROR = '$idempotentMutationsError';

/** A Decimal's text, `-0` included (decimal.js's `toString` writes it `0`; its `toJSON` does not). */
function decimalText(value: DecimalLike): string {
  const text = value.toString();
  return text === '0' && value.s < 0 ? '-0' : text;
}

/** Names superjson refuses as a prototype pollution risk. */
const REFUSED_MEMBERS = new Set(['__proto__', 'constructor', 'prototype']);

/** superjson's annotations of a Date and of a Decimal (registered as `Decimal` above). */
const DATE: Annotation = ['Date'];
const DECIMAL: Annotation = [['custom', 'Decimal']];

/** superjson's annotation of one value, and of what is annotated below a container, by path. */
type Annotation = unknown[];
type Annotations = Record<string, Annotation>;

/**
 * superjson's `meta.values` for `value` (`{}` when it has none), when `JSON.stringify(value)` is
 * exactly superjson's `json` and the text reads back equal; `undefined` for anything else, which
 * superjson writes itself. That is: `null`, booleans, strings, finite numbers other than `-0`,
 * valid Dates and instances of `Decimal` below the root, in arrays and plain objects, with no
 * `undefined` (nor array holes), no member superjson refuses, and no object reached twice
 * (superjson records those as referential equalities). A Date is written by its `toJSON`, which is
 * superjson's `toISOString`; a Decimal by its `toJSON`, which is the rule's text above. The paths
 * are gathered container by container, as superjson's walk gathers them, so they come out in its
 * order.
 */
function typedValues(value: unknown, Decimal: DecimalConstructor | undefined): Annotations | undefined {
  const seen = new Set<object>();
  const root = walk(value, true);
  return root === false || Array.isArray(root) ? undefined : (root ?? {});

  /** `false`: not for us; `null`: nothing annotated; else the annotation, or those below. */
  function walk(member: unknown, atRoot: boolean): false | null | Annotation | Annotations {
    switch (typeof member) {
      case 'string':
      case 'boolean':
        return null;
      case 'number':
        return Number.isFinite(member) && !Object.is(member, -0) && null;
      case 'object':
        break;
      default:
        return false;
    }
    if (member === null) return null;
    if (seen.has(member)) return false;
    seen.add(member);
    const prototype = Object.getPrototypeOf(member);
    if (Array.isArray(member)) {
      // superjson walks an array's own fields too (a match result's `groups`): only indices here.
      // JSON writes what a `toJSON` returns (one not enumerable too), superjson the members.
      if (prototype !== Array.prototype || Object.keys(member).length !== member.length || 'toJSON' in member)
        return false;
      let below: Annotations | null = null;
      for (let i = 0; i < member.length; i++) {
        const annotated = walk(member[i], false);
        if (annotated === false) return false;
        if (annotated !== null) below = gather(below, String(i), annotated);
      }
      return below;
    }
    if (prototype === Object.prototype || prototype === null) {
      // An object with a Decimal's fields and methods is one to superjson's rule; one with a
      // `toJSON` (not enumerable too) JSON writes as what it returns, superjson by its members.
      if (isDecimal(member) || 'toJSON' in member) return false;
      let below: Annotations | null = null;
      for (const key of Object.keys(member)) {
        if (REFUSED_MEMBERS.has(key)) return false;
        const annotated = walk((member as Record<string, unknown>)[key], false);
        if (annotated === false) return false;
        if (annotated !== null) below = gather(below, escapeKey(key), annotated);
      }
      return below;
    }
    // A Date or a Decimal as the whole result is annotated otherwise: superjson writes it.
    if (atRoot) return false;
    // A Date of its own class with no fields of its own (a `toJSON`, a `valueOf`, a Decimal's `d`
    // would each change what JSON or superjson write).
    if (prototype === Date.prototype) {
      if (Reflect.ownKeys(member).length > 0) return false;
      return !Number.isNaN(Date.prototype.getTime.call(member)) && DATE;
    }
    // An instance of `Decimal` itself, not of a subclass (whose text the constructor may refuse),
    // with decimal.js's own `toJSON` and `toString`.
    if (Decimal !== undefined && prototype === Decimal.prototype && isDecimal(member)) {
      if (Object.hasOwn(member, 'toJSON') || Object.hasOwn(member, 'toString')) return false;
      const decimal = member as DecimalLike & { toJSON(): unknown };
      return decimal.toJSON() === decimalText(decimal) && DECIMAL;
    }
    return false;
  }
}

/** Adds what is annotated at (or below) `segment` to its container's annotations. */
function gather(
  below: Annotations | null,
  segment: string,
  annotated: Annotation | Annotations,
): Annotations {
  const into = below ?? {};
  if (Array.isArray(annotated)) into[segment] = annotated;
  else for (const [path, annotation] of Object.entries(annotated)) into[`${segment}.${path}`] = annotation;
  return into;
}

/** A key as a segment of a superjson path: `\` and `.` escaped. */
function escapeKey(key: string): string {
  return key.replace(/\\/g, '\\\\').replace(/\./g, '\\.');
}
