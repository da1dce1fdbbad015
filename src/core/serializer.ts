import { SuperJSON } from 'superjson';
import { type DecimalLike, isDecimal } from './fingerprint.js';

/** Turns a result into the text stored with the record, and back for a replay. */
export interface Serializer {
  serialize(value: unknown): string;
  deserialize(text: string): unknown;
  /**
   * Whether `deserialize(serialize(value))` is known to equal `value` without trying it (plain JSON
   * data, for the default serializer); the result is then stored without being read back first.
   * @default every result is read back before it is stored
   */
  readsBack?(value: unknown): boolean;
}

/** A constructor of arbitrary-precision decimals, such as Prisma's `Prisma.Decimal`. */
export type DecimalConstructor = new (value: string) => unknown;

/**
 * The default serializer: superjson, so Date, BigInt, Map, Set, undefined, RegExp, Error, typed
 * arrays, Buffers and ArrayBuffers come back as they went in (instances of other classes come back
 * as plain objects). Decimals come back as instances of `Decimal` (the Prisma store
 * passes Prisma's); without it a Decimal in a result fails the mutation before anything commits,
 * rather than replaying as a different type.
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
        return value.toString();
      },
      deserialize: (text) => {
        if (!Decimal) throw new TypeError('Cannot replay a Decimal: pass superjsonSerializer({ Decimal })');
        return new Decimal(text) as DecimalLike;
      },
    },
    'Decimal',
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
      deserialize: (text) => {
        const bytes = Buffer.from(text, 'base64');
        return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
      },
    },
    'ArrayBuffer',
  );
  return {
    // Plain JSON data needs none of superjson's walk: its text is what superjson would write.
    serialize: (value) =>
      isPlainJson(value)
        ? `{"json":${JSON.stringify(value)}}`
        : superjson.stringify(value as Parameters<SuperJSON['stringify']>[0]),
    deserialize: (text) => superjson.parse(text),
    readsBack: isPlainJson,
  };
}

/** Names superjson refuses as a prototype pollution risk. */
const REFUSED_MEMBERS = new Set(['__proto__', 'constructor', 'prototype']);

/**
 * Whether `value` is data that JSON writes and reads back exactly, and that superjson would write
 * as JSON with no `meta`: `null`, booleans, strings, finite numbers other than `-0`, and arrays and
 * plain objects of them, with no `undefined` (nor array holes), no member superjson refuses, and no
 * object reached twice (superjson records those as referential equalities).
 */
function isPlainJson(value: unknown, seen = new Set<object>()): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value) && !Object.is(value, -0);
    case 'object':
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (seen.has(value)) return false;
  seen.add(value);
  const prototype = Object.getPrototypeOf(value);
  if (Array.isArray(value)) {
    if (prototype !== Array.prototype) return false;
    for (let i = 0; i < value.length; i++) if (!isPlainJson(value[i], seen)) return false;
    return true;
  }
  if (prototype !== Object.prototype && prototype !== null) return false;
  for (const key of Object.keys(value)) {
    if (REFUSED_MEMBERS.has(key)) return false;
    if (!isPlainJson((value as Record<string, unknown>)[key], seen)) return false;
  }
  return true;
}
