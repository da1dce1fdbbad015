/**
 * `{ ...object, ...members }`: a new object with `object`'s own enumerable members, then `members`'.
 * Made with `Object.assign`, for the calls every request makes: on Node 20 each member an object
 * literal defines after a spread takes V8's slow path, about 1 µs apiece (a call's options,
 * fourteen members after `...options`, took 17 µs against 0.3 µs this way).
 *
 * Unlike a spread, `Object.assign` sets the prototype for a member named `__proto__`: not for
 * objects that may come from JSON. Write `members` as `{ … } satisfies Partial<Target>`, so that a
 * misspelt member is still refused.
 */
export function withMembers<A extends object, B extends object>(object: A, members: B): Omit<A, keyof B> & B {
  return Object.assign({}, object, members);
}
