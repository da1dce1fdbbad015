import { isDecimal } from '../core/fingerprint.js';
import type { Serializer } from '../core/serializer.js';

/**
 * `serializer`, refusing a field's result that graphql-js would read through code a replay does
 * not have: a function member (graphql-js's default resolver calls it), or an instance of a class
 * that gives it members (methods, getters, an iterator: read by field resolvers, list completion or
 * a custom scalar's `serialize`) and that the serializer does not bring back (superjson, unless told
 * of the class, gives back a plain object). Its refusal makes the result unstorable, so in
 * transactional mode nothing commits, and in lease mode it answers for the key; stored, the first
 * call would answer the field and every replay fail it.
 */
export function refusingReadThroughCode(serializer: Serializer): Serializer {
  let checked: unknown;
  let classes: ClassMembers[] = [];
  const check = (value: unknown) => {
    if (value !== checked) classes = classesIn(value);
    checked = value;
    return value;
  };
  return {
    serialize: (value) => {
      const text = serializer.serialize(check(value));
      if (classes.length > 0) refuseLostClasses(classes, value, serializer.deserialize(text));
      return text;
    },
    deserialize: (text) => serializer.deserialize(text),
    ...(serializer.serializeKnown && {
      // Only for values that come back equal; an instance of another class never does.
      serializeKnown: (value: unknown) => serializer.serializeKnown!(check(value)),
    }),
  };
}

/** An instance in a result whose class gives it a member (`member`), which a replay needs too. */
interface ClassMembers {
  instance: object;
  member: string;
}

/**
 * The instances of classes with members of their own in `value`; throws at a function member,
 * which no serializer stores.
 */
function classesIn(value: unknown, seen = new Set<object>(), found: ClassMembers[] = []): ClassMembers[] {
  if (typeof value !== 'object' || value === null || seen.has(value) || isBuiltIn(value)) return found;
  seen.add(value);
  const member = memberFromClass(value);
  if (member !== undefined) found.push({ instance: value, member });
  for (const [name, field] of Object.entries(value)) {
    if (typeof field === 'function') {
      throw new TypeError(
        `its member "${name}" is a function, which graphql-js calls to answer the field and a replay would not have (results are stored as plain data): return its value`,
      );
    }
    classesIn(field, seen, found);
  }
  return found;
}

/**
 * Refuses the result when the serializer's copy of it (`copy`) lost the class of an instance that
 * reads members from it: the replay's plain object would not answer as the first call did.
 */
function refuseLostClasses(classes: ClassMembers[], value: unknown, copy: unknown): void {
  const copies = new Map<object, unknown>();
  pair(value, copy, copies);
  for (const { instance, member } of classes) {
    if (Object.getPrototypeOf(copies.get(instance) ?? null) === Object.getPrototypeOf(instance)) continue;
    const name = instance.constructor?.name || 'a class';
    throw new TypeError(
      `an instance of ${name} gets "${member}" from its class, which graphql-js may read (a method, a getter, an iterator, a resolveType or isTypeOf testing its class), and the store's serializer gives it back as a plain object: return plain data, or give the store a serializer that keeps ${name}`,
    );
  }
}

/** Maps each object of `value` to the object at the same place in `copy`. */
function pair(value: unknown, copy: unknown, copies: Map<object, unknown>): void {
  if (typeof value !== 'object' || value === null || copies.has(value) || isBuiltIn(value)) return;
  copies.set(value, copy);
  for (const [name, field] of Object.entries(value)) {
    pair(field, (copy as Record<string, unknown> | null | undefined)?.[name], copies);
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

/** A member other than `constructor` that `value` gets from its class: a method, a getter, an iterator. */
function memberFromClass(value: object): string | undefined {
  if (Array.isArray(value)) return undefined;
  for (
    let prototype = Object.getPrototypeOf(value);
    prototype !== null && prototype !== Object.prototype;
    prototype = Object.getPrototypeOf(prototype)
  ) {
    for (const name of Reflect.ownKeys(prototype)) {
      if (name !== 'constructor') return String(name);
    }
  }
  return undefined;
}
