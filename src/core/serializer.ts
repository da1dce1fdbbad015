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
 * The default serializer: superjson, so Date, BigInt, Map, Set, undefined, RegExp, Error and typed
 * arrays come back as they went in. Decimals come back as instances of `Decimal` (the Prisma store
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
  return {
    serialize: (value) => superjson.stringify(value as Parameters<SuperJSON['stringify']>[0]),
    deserialize: (text) => superjson.parse(text),
  };
}
