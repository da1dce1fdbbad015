import type { Call } from './call.js';
import { IdempotencyLeaseLostError, IdempotencyOutcomeUnknownError } from './errors.js';
import type { LeaseOwner } from './store.js';

/**
 * What a call answers when a write under its lease (its completion, a step's record) was fenced:
 * the lease ran out and another request took the key over, after this call's effects may have
 * happened. A retry is safe only while the key's record answers for this call, completed (and not
 * expired) or still held by the new owner for the same operation and input: then
 * `IdempotencyLeaseLostError` (409), which clients retry. Once the key was freed (its record gone
 * or expired, or its lease ended), or when a call
 * with another input took it over (whose record would answer the retry with a mismatch, never
 * saying that this call's effects happened), nobody answers for it: `IDEMPOTENCY_OUTCOME_UNKNOWN`.
 * `ran` names what ran: "The mutation", or the step.
 */
export async function leaseLostAnswer<T, Tx>(
  call: Call<T, Tx>,
  owner: LeaseOwner,
  ran: string,
  /** A write under the lease was refused (fenced); else a step was, before it ran, the lease unsure. */
  refused = true,
): Promise<IdempotencyLeaseLostError | IdempotencyOutcomeUnknownError> {
  // `undefined`: the record could not be read (the store did not answer).
  const current = await call.store.find(owner.scope, owner.key).catch(() => undefined);
  // Still this call's own (a step refused because the call could not be sure its lease would hold):
  // nobody took it over (not `fenced`), and the runner frees the key, so no record will answer a retry.
  const own = current != null && current.ownerToken === owner.ownerToken;
  // Unread, and no write refused: nothing says another request took the key.
  const unsure = current === undefined && !refused;
  // A refused write was fenced; a step refused before it ran was, only if another request holds
  // the key (not when its record is gone: expired, or swept).
  if (refused ? !own : current != null && !own) call.emit('fenced');
  const answers =
    current != null &&
    !own &&
    current.operation === call.request.operation &&
    current.fingerprint === call.request.fingerprint &&
    current.liveForMs > 0;
  if (answers) return new IdempotencyLeaseLostError(current.status === 'IN_PROGRESS' ? current.liveForMs : 0);
  const answer = outcomeUnknown(
    call,
    ran,
    own
      ? 'its lease was running out (nothing renewed it, or it reached maxLeaseMs) before its next step, which did not run, and the key is freed'
      : unsure
        ? 'its lease could not be renewed before its next step (the store did not answer), which did not run'
        : current === undefined
          ? 'its lease ran out and another request took the key, or it was freed, before its result could be stored (the store did not answer the read that would say which)'
          : current !== null && current.fingerprint !== call.request.fingerprint
            ? 'its lease ran out and a call with another input took the key over before its result could be stored'
            : 'its lease ran out and the key was freed before its result could be stored',
    undefined,
  );
  if (current === undefined) unread.add(answer);
  return answer;
}

/** `leaseLostAnswer`'s answers given without the key's record, which the store did not answer. */
const unread = new WeakSet<object>();

/**
 * Whether `answer` (`leaseLostAnswer`'s) was given without reading the key's record: nobody can
 * say whether a record answers for the call elsewhere, so no other answer may take its place.
 */
export function answeredUnread(answer: unknown): boolean {
  return typeof answer === 'object' && answer !== null && unread.has(answer);
}

/** `IDEMPOTENCY_OUTCOME_UNKNOWN` for what `ran`: its effects may have happened, and nobody can say. */
export function outcomeUnknown<T, Tx>(
  call: Call<T, Tx>,
  ran: string,
  why: string,
  cause: unknown,
): IdempotencyOutcomeUnknownError {
  call.emit('outcome_unknown');
  return new IdempotencyOutcomeUnknownError(
    `${ran} ran, but ${why}; its effects may have happened. Do not retry blindly: check the effect ` +
      '(e.g. with the key at the payment provider) first',
    { cause },
  );
}
