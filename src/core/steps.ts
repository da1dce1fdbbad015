import { createHash } from 'node:crypto';
import { type Call, storedErrorText, storedText } from './call.js';
import {
  type IdempotencyLeaseLostError,
  IdempotencyOutcomeUnknownError,
  IdempotencyStepDivergedError,
  misuse,
} from './errors.js';
import { storedAsAnother } from './key.js';
import { leaseLostAnswer } from './lease-lost.js';
import type { LeaseOwner, StepOperations, StepRecord, StepWrite } from './store.js';
import { withMembers } from './with-members.js';

/** What a step's `fn` receives. */
export interface StepContext<Tx> {
  /**
   * A key of the step's own, the same on every attempt of the call (derived from its scope, key
   * and the step's name): pass it to the external API as its idempotency key, so that a step that
   * ran but crashed before its record was stored is deduplicated there.
   */
  key: string;
  /** The step's name. */
  name: string;
  /**
   * The store's plain client; in a transactional step, the interactive transaction in which the
   * step's record is stored (its writes commit with the record, or roll back with it).
   */
  tx: Tx;
}

/** Options of one step. */
export interface StepOptions {
  /**
   * Run `fn` in one store transaction with the step's record: an atomic phase for writes to the
   * database. `fn` may run again if the transaction hits a write conflict: keep effects outside the
   * database out of it.
   * @default false
   */
  transactional?: boolean;
}

/**
 * `step(name, fn)`: runs `fn` at most once per `(scope, key, name)` and stores its result under
 * the key before the resolver goes on; a retry (or a takeover of a lease that ran out) gets the
 * stored result without running `fn`. Steps must run one at a time, in the same order with the
 * same names on every attempt.
 */
export type Step<Tx> = <R>(
  name: string,
  fn: (step: StepContext<Tx>) => Promise<R> | R,
  options?: StepOptions,
) => Promise<R>;

/** `step` where there are no steps: transactional mode, where the resolver commits or rolls back as one. */
export const stepsNeedLeaseMode: Step<never> = async (name) => {
  throw misuse(
    new TypeError(
      `step("${name}") needs lease mode (mode: 'lease'): in transactional mode the whole resolver commits or rolls back as one`,
    ),
  );
};

/** The stable key `fn` gets for step `name` of `(scope, key)`: 64 hex characters. */
export function stepKey(scope: string, key: string, name: string): string {
  return createHash('sha256')
    .update(JSON.stringify(['idempotent-mutations/step', scope, key, name]))
    .digest('hex');
}

/** Errors a journal raised rather than `fn`: never stored as a step's or the call's result. */
const journalErrors = new WeakSet<object>();

/**
 * Whether a step journal raised `error` itself (a lost lease, steps that diverged, a step's record
 * that could not be stored), rather than a step's `fn` or the resolver: what it says about the
 * call was checked against the key's record, so an integration answers it as the library's own.
 */
export function raisedBySteps(error: unknown): boolean {
  return typeof error === 'object' && error !== null && journalErrors.has(error);
}

/**
 * The steps of one lease-mode call. The key's stored steps are read at the first step: a call
 * that took over a lease that ran out resumes from them (when they are its own: same input, still
 * live); any other call clears them and starts afresh. Their positions may have gaps: a step whose
 * `fn` failed (and whose error the resolver caught) stored nothing, and runs again on a retry.
 */
export class StepJournal<T, Tx> {
  private stored: StepRecord[] | undefined;
  private next = 0;
  /** The step running now, settled once it has (its result stored, or its failure known). */
  private running: Promise<void> | undefined;
  private finished = false;
  private saving = false;
  private lost = false;
  private readonly names = new Set<string>();

  constructor(
    private readonly call: Call<T, Tx>,
    private readonly owner: LeaseOwner,
    /** Whether the call took over a record that was no longer live (whose steps it may resume). */
    private readonly resumes: boolean,
    /**
     * Whether the call's lease is surely held now (renewing it if it may have run out): a step's
     * `fn` runs only then, never while another request may have taken the key over and run it.
     */
    private readonly leaseHeld: () => Promise<boolean>,
  ) {}

  /**
   * Whether the key may hold steps (or a step write was tried): its claim must stay for a retry to
   * resume. A call that took a record over and failed before its first step never read that
   * record's steps: they are taken to be there, or deleting its claim would let the next call
   * clear them and run them again.
   */
  get holdsSteps(): boolean {
    return this.saving || (this.stored === undefined ? this.resumes : this.stored.length > 0);
  }

  /**
   * The heartbeat found the lease taken over: no step's `fn` runs from now on (its new owner
   * runs them), and a step answers what `leaseLostAnswer` says. Stored steps still replay.
   */
  leaseLost(): void {
    this.lost = true;
  }

  /** The resolver has returned: later steps are refused. */
  finish(): void {
    this.finished = true;
  }

  /**
   * Whether a step is still running: a resolver that failed beside one (as in `Promise.all`) left
   * it running, and its effect may land after the call answers.
   */
  get stepRunning(): boolean {
    return this.running !== undefined;
  }

  /** Settles once the step running now (if any) has. */
  stepSettled(): Promise<void> {
    return this.running ?? Promise.resolve();
  }

  readonly step: Step<Tx> = async (name, fn, options = {}) => {
    if (typeof name !== 'string' || name.length === 0 || name.length > 255) {
      throw misuse(new TypeError('A step name must be a string of 1 to 255 characters'));
    }
    // Refused on every store, before `fn` runs: a name the database would store as another (or
    // not at all) would fail its save after its effects, on every retry again.
    if (name.endsWith(' ') || storedAsAnother(name)) {
      throw misuse(
        new TypeError(
          `The step name ${JSON.stringify(name)} ends in a space, holds a NUL character or an unpaired surrogate: MySQL/MariaDB compare names with trailing spaces ignored (it would be another step's), PostgreSQL stores no NUL, and an unpaired surrogate is stored as U+FFFD`,
        ),
      );
    }
    if (this.finished) throw misuse(new Error(`step("${name}") was called after the resolver returned`));
    if (this.running) {
      throw misuse(
        new Error(`step("${name}") started while another step ran: await each step before the next`),
      );
    }
    const steps = this.call.store.steps;
    if (!steps) throw misuse(new TypeError('This store keeps no steps: step() needs a store with `steps`'));
    this.checkKeptLongEnough();
    let settle = () => {};
    this.running = new Promise((resolve) => {
      settle = resolve;
    });
    try {
      if (this.names.has(name)) {
        throw this.raise(
          new IdempotencyStepDivergedError(
            `The step "${name}" ran twice in one call: give each step a name of its own`,
          ),
        );
      }
      this.names.add(name);
      const position = this.next++;
      const done = this.storedStep(await this.load(steps), name, position);
      // Runs `fn` and stores its result, or answers with the stored one.
      const answer = async () => {
        // Nothing of this step ran; what ran before it is the mutation's.
        if (!done && (this.lost || !(await this.leaseHeld())))
          throw await this.lostLeaseAnswer('The mutation', this.lost);
        if (!done) return this.run(steps, name, position, fn, options);
        const value = this.call.serializer.deserialize(done.result);
        if (done.resultIsError) throw this.call.errorCodec.decode(value);
        return value as Awaited<ReturnType<typeof fn>>;
      };
      const { tracking } = this.call;
      if (!tracking) return await answer();
      return await tracking.step({ name, position, replayed: done !== undefined }, answer);
    } finally {
      this.running = undefined;
      settle();
    }
  };

  /**
   * Steps expire with their record, `ttlMs` after the claim: a call that may hold its key as long
   * (its heartbeat up to `maxLeaseMs`, else `leaseMs`) could outlive them, and a retry after it
   * failed would find them expired and run them again. Refused at the first step, before any `fn`
   * runs.
   */
  private checkKeptLongEnough(): void {
    const { ttlMs, leaseMs, heartbeatMs, maxLeaseMs } = this.call;
    const [held, name] = heartbeatMs === undefined ? [leaseMs, 'leaseMs'] : [maxLeaseMs, 'maxLeaseMs'];
    if (ttlMs > held) return;
    throw this.raise(
      new RangeError(
        `ttlMs (${ttlMs}) is not longer than the longest this call may hold its key (${name}, ${held}` +
          `${heartbeatMs === undefined ? '' : ', with heartbeatMs'}): its steps could expire while it runs. ` +
          `Choose a longer ttlMs or a shorter ${name} for a call that runs steps`,
      ),
    );
  }

  /**
   * The stored step that answers for step `name` at `position`, if any. Another step stored at
   * this position, or this one stored at another, means the steps changed since they were stored.
   */
  private storedStep(stored: StepRecord[], name: string, position: number): StepRecord | undefined {
    const there = stored.find((step) => step.position === position);
    const done = stored.find((step) => step.name === name);
    if (there && there !== done) {
      throw this.diverged(
        `Step ${position + 1} of this call is "${name}", but the attempt that stored its steps ran "${there.name}" there`,
      );
    }
    if (done && done !== there) {
      throw this.diverged(
        `The step "${name}" is step ${position + 1} of this call, but the attempt that stored it ran it as step ${done.position + 1}`,
      );
    }
    return done;
  }

  private diverged(why: string): IdempotencyStepDivergedError {
    return this.raise(
      new IdempotencyStepDivergedError(
        `${why}: steps must run in the same order with the same names on every attempt. Nothing was stored`,
      ),
    );
  }

  /** The key's stored steps this call may replay: its own after a takeover, else none (cleared). */
  private async load(steps: StepOperations<Tx>): Promise<StepRecord[]> {
    if (this.stored) return this.stored;
    const { scope, key } = this.owner;
    const found = await steps.list(scope, key);
    const fingerprint = this.call.request.fingerprint;
    const own = this.resumes && found.every((step) => step.fingerprint === fingerprint && step.liveForMs > 0);
    if (own) this.stored = found;
    else {
      // Left by an earlier call of the key (another input, or one whose record expired).
      if (found.length > 0) await steps.clear(this.owner);
      this.stored = [];
    }
    return this.stored;
  }

  private async run<R>(
    steps: StepOperations<Tx>,
    name: string,
    position: number,
    fn: (step: StepContext<Tx>) => Promise<R> | R,
    options: StepOptions,
  ): Promise<R> {
    const { call, owner } = this;
    const context = { key: stepKey(owner.scope, owner.key, name), name };
    const write = (result: string, resultIsError: boolean): StepWrite =>
      withMembers(owner, { name, position, fingerprint: call.request.fingerprint, result, resultIsError });
    try {
      if (options.transactional) {
        const { value, stored } = await steps.transaction(async (session) => {
          const value = await fn({ ...context, tx: session.tx });
          const stored = write(storedText(call.serializer, value, call.maxResultBytes), false);
          this.saving = true;
          // Fenced: `fn`'s writes roll back with the step; what to answer is read after the rollback.
          if (!(await session.save(stored))) throw new StepFenced();
          return { value, stored };
        });
        this.remember(stored);
        return value;
      }
      const value = await fn({ ...context, tx: call.store.lease.client });
      // A result that cannot be stored fails here; the step runs again on a retry, with its key.
      await this.save(steps, write(storedText(call.serializer, value, call.maxResultBytes), false));
      return value;
    } catch (error) {
      if (error instanceof StepFenced) throw await this.lostLeaseAnswer(`The step "${name}"`);
      // `call.replayErrors` (`replayPolicy`) never accepts an error of ours: a nested call's.
      if (raisedBySteps(error) || !call.replayErrors?.(error)) throw error;
      // A replayable error (a declined card) is the step's outcome: replayed to every retry.
      const stored = storedErrorText(call, error);
      if (stored !== undefined) await this.save(steps, write(stored, true));
      throw error;
    }
  }

  /** Stores a step that ran; past this point its effects have happened. */
  private async save(steps: StepOperations<Tx>, step: StepWrite): Promise<void> {
    this.saving = true;
    let saved: boolean;
    try {
      saved = await steps.save(step);
    } catch (cause) {
      this.call.emit('outcome_unknown');
      throw this.raise(
        new IdempotencyOutcomeUnknownError(
          `The step "${step.name}" ran, but its result could not be stored; its effects may have happened. A retry runs it again with the same step key`,
          { cause },
        ),
      );
    }
    if (!saved) throw await this.lostLeaseAnswer(`The step "${step.name}"`);
    this.remember(step);
  }

  private remember(step: StepWrite): void {
    const { name, position, fingerprint, result, resultIsError } = step;
    this.stored?.push({
      name,
      position,
      fingerprint,
      result,
      resultIsError,
      completedAt: new Date(),
      liveForMs: 1,
    });
  }

  /**
   * Another request took the key over (`refused`: a write, or a renewal, said so; else the lease
   * could not be confirmed before a step): this call stops before its next step, with a 409 only
   * while the key's record will answer a retry (`leaseLostAnswer`).
   */
  private async lostLeaseAnswer(
    ran: string,
    refused = true,
  ): Promise<IdempotencyLeaseLostError | IdempotencyOutcomeUnknownError> {
    return this.raise(await leaseLostAnswer(this.call, this.owner, ran, refused));
  }

  private raise<E extends Error>(error: E): E {
    journalErrors.add(error);
    return error;
  }
}

/** Thrown in a transactional step whose record was fenced, so that its transaction rolls back. */
class StepFenced extends Error {
  override name = 'StepFenced';
}
