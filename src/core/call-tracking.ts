import type { IdempotencyEventType } from './events.js';
import type {
  CallObserver,
  IdempotencyOutcome,
  IdempotencyPhase,
  ObserveCall,
  ObservedCall,
  ObservedStep,
} from './observer.js';

/**
 * Set by an integration on its own wrapper of the resolver's error (the Envelop plugin's failed
 * operation under a header key): what observers are shown in its place (its first field's error),
 * as a field key shows them the resolver's own.
 */
export const observedError = Symbol('idempotent-mutations.observedError');

/** `error`, or what it says observers are shown (`observedError`). */
function shownOf(error: unknown): unknown {
  return typeof error === 'object' && error !== null && observedError in error
    ? (error as { [observedError]: unknown })[observedError]
    : error;
}

/**
 * What the runners tell an observer, kept on the call only when `observe` is set: the runners
 * reach it through `call.tracking?.`, so an unobserved call pays nothing else. Observers never
 * change the outcome: whatever they throw is swallowed.
 */
export class CallTracking {
  /** Set when the call found its key held by a duplicate and waited for it. */
  waited = false;
  /** How many times the store ran this call's transaction. */
  attempts = 0;
  resultBytes: number | undefined;
  private outcome: IdempotencyOutcome | undefined;
  private readonly started: number;

  private constructor(
    private readonly observer: CallObserver,
    private readonly clock: () => number,
  ) {
    this.started = clock();
  }

  /** The tracking of a call, or `undefined` when nobody observes it. */
  static of(
    observe: ObserveCall | undefined,
    call: ObservedCall,
    clock: () => number,
  ): CallTracking | undefined {
    if (!observe) return undefined;
    let observer: CallObserver | undefined;
    try {
      observer = observe(call);
    } catch {
      return undefined;
    }
    return observer ? new CallTracking(observer, clock) : undefined;
  }

  /** Runs the call within the observer's `around` (see `within`), and reports its end. */
  run<R>(work: () => Promise<R>): Promise<R> {
    const observed = async () => {
      try {
        const value = await work();
        this.end(false, undefined);
        return value;
      } catch (error) {
        this.end(true, error);
        throw error;
      }
    };
    const { observer } = this;
    return observer.around ? within((run) => observer.around!(run), observed) : observed();
  }

  start(phase: IdempotencyPhase): void {
    try {
      this.observer.phaseStart?.(phase, this.clock());
    } catch {
      // An observer must never change the outcome.
    }
  }

  finish(phase: IdempotencyPhase, error?: unknown): void {
    try {
      this.observer.phaseEnd?.(phase, this.clock(), shownOf(error));
    } catch {
      // An observer must never change the outcome.
    }
  }

  /** Runs a step within the observer's `step` (see `within`). */
  step<R>(step: ObservedStep, run: () => Promise<R>): Promise<R> {
    const { observer } = this;
    return observer.step ? within((go) => observer.step!(step, go), run) : run();
  }

  /** `waiting` (for a duplicate holding the key) as the call's `wait` phase. */
  async waitFor<R>(waiting: Promise<R>): Promise<R> {
    this.waited = true;
    this.start('wait');
    try {
      return await waiting;
    } finally {
      this.finish('wait');
    }
  }

  /**
   * Follows the call's events to its outcome: the last one that says how the call ended wins,
   * except that an unknown outcome stays one: the key freed after it (`released`) does not make it
   * known.
   */
  event(type: IdempotencyEventType): void {
    if (type === 'completed' || this.outcome === 'outcome_unknown') return;
    if (type === 'claimed') this.outcome = 'executed';
    else if (type === 'replayed') this.outcome = this.waited ? 'waited_then_replayed' : 'replayed';
    else this.outcome = type;
  }

  private end(failed: boolean, error: unknown): void {
    try {
      this.observer.end({
        outcome: this.outcome,
        failed,
        error: shownOf(error),
        txRetries: Math.max(0, this.attempts - 1),
        resultBytes: this.resultBytes,
        durationMs: this.clock() - this.started,
      });
    } catch {
      // An observer must never change the outcome.
    }
  }
}

/**
 * `work` run within `wrap` (an observer's `around` or `step`): once, and answering with its own
 * outcome, whatever `wrap` throws or returns. When `wrap` failed (or returned) without running it,
 * it runs on its own.
 */
function within<R>(wrap: (run: () => Promise<R>) => unknown, work: () => Promise<R>): Promise<R> {
  let running: Promise<R> | undefined;
  const own = () => {
    if (!running) {
      running = work();
      // Answered once `wrap` settles: a failure meanwhile is not an unhandled rejection.
      running.catch(() => undefined);
    }
    return running;
  };
  try {
    return Promise.resolve(wrap(own)).then(own, own);
  } catch {
    return own();
  }
}
