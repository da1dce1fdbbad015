import { SuperJSON } from 'superjson';
import { type DecimalLike, isDecimal } from './fingerprint.js';

/** Turns a result into the text stored with the record, and back for a replay. */
export interface Serializer {
  serialize(value: unknown): string;
  deserialize(text: string): unknown;
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
    serialize: (value) => superjson.stringify(value as Parameters<SuperJSON['stringify']>[0]),
    deserialize: (text) => superjson.parse(text),
  };
}
