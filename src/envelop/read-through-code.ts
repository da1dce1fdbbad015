import { isDecimal } from '../core/fingerprint.js';
import type { Serializer } from '../core/serializer.js';

/**
 * `serializer`, refusing a field's result that graphql-js would read through code a replay does
 * not have: a function (graphql-js's default resolver calls it) or a getter of a class instance
 * (the stored copy keeps its own fields only). Its refusal makes the result unstorable, so in
 * transactional mode nothing commits, and in lease mode it answers for the key; stored, the first
 * call would answer the field and every replay fail it.
 */
export function refusingReadThroughCode(serializer: Serializer): Serializer {
  let checked: unknown;
  const check = (value: unknown) => {
    if (value !== checked) refuseReadThroughCode(value);
    checked = value;
    return value;
  };
  return {
    serialize: (value) => serializer.serialize(check(value)),
    deserialize: (text) => serializer.deserialize(text),
    ...(serializer.serializeKnown && {
      serializeKnown: (value: unknown) => serializer.serializeKnown!(check(value)),
    }),
  };
}

function refuseReadThroughCode(value: unknown, seen = new Set<object>()): void {
  if (typeof value !== 'object' || value === null || seen.has(value)) return;
  seen.add(value);
  if (isBuiltIn(value)) return;
  const getter = inheritedGetter(value);
  if (getter !== undefined) {
    throw new TypeError(
      `an instance of ${value.constructor?.name || 'a class'} reads "${getter}" through a getter, which a replay would not have (results are stored as plain data): return a plain object`,
    );
  }
  for (const [name, member] of Object.entries(value)) {
    if (typeof member === 'function') {
      throw new TypeError(
        `its member "${name}" is a function, which graphql-js calls to answer the field and a replay would not have (results are stored as plain data): return its value`,
      );
    }
    refuseReadThroughCode(member, seen);
  }
}

/** Objects the serializer stores as what they are (a Decimal has a function of its own, `constructor`). */
function isBuiltIn(value: object): boolean {
  return (
    value instanceof Date ||
    value instanceof Map ||
    value instanceof Set ||
    value instanceof RegExp ||
    value instanceof URL ||
    value instanceof Error ||
    value instanceof ArrayBuffer ||
    ArrayBuffer.isView(value) ||
    isDecimal(value)
  );
}

/** A getter `value` inherits from its class and has no own field for. */
function inheritedGetter(value: object): string | undefined {
  for (
    let prototype = Object.getPrototypeOf(value);
    prototype !== null && prototype !== Object.prototype;
    prototype = Object.getPrototypeOf(prototype)
  ) {
    for (const [name, descriptor] of Object.entries(Object.getOwnPropertyDescriptors(prototype))) {
      if (descriptor.get && !Object.hasOwn(value, name)) return name;
    }
  }
  return undefined;
}
