import type { Store } from './store.js';

/** How a call runs: see `RunIdempotentOptions.mode`. */
export type IdempotencyMode = 'transactional' | 'lease';

/**
 * The mode a call runs in: the first of `choices` that is set (a procedure's or field's own, then
 * the integration's), else the store's default, else `transactional`.
 */
export function modeOf(
  store: Pick<Store<unknown>, 'defaults'>,
  ...choices: (IdempotencyMode | undefined)[]
): IdempotencyMode {
  return choices.find((mode) => mode !== undefined) ?? store.defaults?.mode ?? 'transactional';
}

/**
 * Runs a call that sent no key where the key is optional: nothing is recorded, but `work` gets the
 * `tx` a keyed call would get. In lease mode that is the store's plain client; otherwise a store
 * transaction, so the resolver's writes still commit or roll back together (and a write conflict
 * is retried as for a keyed call).
 */
export function runUnrecorded<Tx, T>(
  store: Store<Tx>,
  mode: IdempotencyMode,
  work: (tx: Tx) => Promise<T>,
): Promise<T> {
  const transaction = store.transaction?.bind(store);
  if (mode === 'lease' || !transaction) return work(store.lease.client);
  return transaction((session) => work(session.tx));
}
