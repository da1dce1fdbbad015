import { isDecimal } from '../core/fingerprint.js';
import type { Serializer } from '../core/serializer.js';

/**
 * `serializer`, refusing a field's result that graphql-js would read through code a replay does
 * not have: a function member (graphql-js's default resolver calls it), or an instance of a class
 * that gives it a getter (read as a field) or an iterator (read as a list) and that the serializer
 * does not bring back (superjson, unless told of the class, gives back a plain object). A class's
 * methods are no reason: an entity of an ORM has many that no field reads. Its refusal makes the
 * result unstorable, so in transactional mode nothing commits, and in lease mode it answers for the
 * key; stored, the first call would answer the field and every replay fail it.
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

/** An instance in a result whose class gives it a getter or an iterator (`member`), which a replay needs too. */
interface ClassMembers {
  instance: object;
  member: string;
}

/**
 * The instances of classes with members of their own in `value`; throws at a function member,
 * which no serializer stores.
 */
function classesIn(value: unknown, seen = new Set<object>(), found: ClassMembers[] = []): ClassMembers[] {
  if (typeof value !== 'object' || value === null || seen.has(value)) return found;
  seen.add(value);
  // A list may come as a Set or a Map's values: graphql-js reads the instances in them too.
  if (value instanceof Set || value instanceof Map) {
    for (const member of value.values()) {
      if (typeof member === 'function') {
        throw new TypeError(
          `it holds a function in a ${value instanceof Set ? 'Set' : 'Map'}, which graphql-js calls to answer the field and a replay would not have (results are stored as plain data): return its value`,
        );
      }
      classesIn(member, seen, found);
    }
    return found;
  }
  if (isBuiltIn(value)) return found;
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
    const copied = copies.get(instance);
    const kept = typeof copied === 'object' && copied !== null;
    if (kept && Object.getPrototypeOf(copied) === Object.getPrototypeOf(instance)) continue;
    const name = instance.constructor?.name || 'a class';
    throw new TypeError(
      `an instance of ${name} gets "${member}" from its class, which graphql-js may read (a getter as a field, an iterator as a list), and the store's serializer does not give it back as one: return plain data, or give the store a serializer that keeps ${name}`,
    );
  }
}

/** Maps each object of `value` to the object at the same place in `copy`. */
function pair(value: unknown, copy: unknown, copies: Map<object, unknown>): void {
  if (typeof value !== 'object' || value === null || copies.has(value)) return;
  copies.set(value, copy);
  if (value instanceof Set || value instanceof Map) {
    const copied = copy instanceof Set || copy instanceof Map ? [...copy.values()] : [];
    let at = 0;
    for (const member of value.values()) pair(member, copied[at++], copies);
    return;
  }
  if (isBuiltIn(value)) return;
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

/** A getter `value` gets from its class (and has no own field for), or its class's iterator. */
function memberFromClass(value: object): string | undefined {
  if (Array.isArray(value)) return undefined;
  for (
    let prototype = Object.getPrototypeOf(value);
    prototype !== null && prototype !== Object.prototype;
    prototype = Object.getPrototypeOf(prototype)
  ) {
    for (const name of Reflect.ownKeys(prototype)) {
      if (name === Symbol.iterator) return 'Symbol.iterator';
      const descriptor = Object.getOwnPropertyDescriptor(prototype, name);
      if (descriptor?.get && !Object.hasOwn(value, name)) return String(name);
    }
  }
  return undefined;
}
