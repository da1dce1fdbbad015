import { TRPCError, type TRPCMiddlewareFunction } from '@trpc/server';
import { ATTEMPT_HEADER, isFirstAttempt } from '../core/attempt-header.js';
import { carriesIdempotencyError, IdempotencyKeyMissingError, isIdempotencyError } from '../core/errors.js';
import type { IdempotencyEvent } from '../core/events.js';
import { callHeaders, type HeadersLike, headerOf } from '../core/headers.js';
import { httpAnswerOf } from '../core/http-status.js';
import { parseKeyHeader, refuseHeaderKeyOnBatch, resolveKey } from '../core/key.js';
import { type RunIdempotentOptions, runIdempotent } from '../core/run-idempotent.js';
import { raisedBySteps, type Step, stepsNeedLeaseMode } from '../core/steps.js';
import { modeOf, runUnrecorded } from '../core/unrecorded.js';
import { withMembers } from '../core/with-members.js';
import { isInputRefusal, toTRPCError, trpcErrorCodec } from './errors.js';
import {
  callsInRequest,
  type EnclosingCall,
  enclosingCallOf,
  requestHeadersOf,
  setResponseHeader,
} from './http-context.js';

/** What a resolver behind the middleware finds in `ctx.idempotency`. */
export interface IdempotencyContext<Tx = unknown> {
  /** The key the call runs under. */
  key: string;
  /**
   * Whether the result is a replay. A replay never runs the resolver, so the resolver always
   * reads `false`; clients see replays by the `Idempotent-Replayed: true` response header.
   */
  replayed: boolean;
  /** The sha256 of the procedure path and the input (see `fingerprintInput`), without the key. */
  fingerprint: string;
  /** When the key was claimed. */
  firstSeenAt: Date;
  /**
   * Lease mode: `ctx.idempotency.step(name, fn)` runs `fn` at most once per key and step name and
   * stores its result before the resolver goes on; a retry after a crash resumes after the steps
   * that completed. `fn` gets the step's own stable `key` for the external API. Throws in
   * transactional mode.
   */
  step: Step<Tx>;
}

/** Per-procedure policy, set with `.meta({ idempotency: { … } })`; it overrides the middleware's options. */
export interface IdempotencyPolicy {
  /**
   * Reject calls without a key (`BAD_REQUEST`), or run them unrecorded.
   * @default the middleware's `required`
   */
  required?: boolean;
  /**
   * How long a completed result is replayed, in ms.
   * @default the middleware's `ttlMs`
   */
  ttlMs?: number;
  /**
   * `transactional` or `lease`, as in `runIdempotent`. In lease mode `ctx.tx` is **not** a
   * transaction: it is the store's plain client (`prisma` itself for `prismaStore`, though typed as
   * its transaction client), so every write through it commits on its own and stays when the
   * resolver throws; a duplicate call during the lease waits for the result, and gets `CONFLICT`
   * (`IDEMPOTENCY_KEY_IN_PROGRESS`) after `waitTimeoutMs`. Keyless calls of an optional key get the
   * same client.
   * @default the middleware's `mode`, else the store's, else 'transactional'
   */
  mode?: RunIdempotentOptions['mode'];
  /**
   * Lease mode: how long the claim is held before another request may take the key over.
   * @default the middleware's `leaseMs`, else the store's, else 30_000
   */
  leaseMs?: number;
  /**
   * Lease mode: extend the lease every `heartbeatMs` while the resolver runs; shorter than `leaseMs`.
   * @default the middleware's `heartbeatMs`, else the store's, else none
   */
  heartbeatMs?: number;
}

/** Add to your meta type (`initTRPC.meta<IdempotencyMeta>()`) to set policy per procedure. */
export interface IdempotencyMeta {
  idempotency?: IdempotencyPolicy;
}

/**
 * What the middleware adds to the context: the transaction client under `txName`, and
 * `idempotency`, which is `null` when the key is optional and the client sent none.
 */
export type IdempotencyContextOverrides<Tx, TxName extends string = 'tx'> = {
  [Name in TxName]: Tx;
} & { idempotency: IdempotencyContext<Tx> | null };

/** What `scope` receives. */
export interface ScopeOptions<Ctx> {
  /** The context as the middleware sees it, narrowed by the middlewares before it. */
  ctx: Ctx;
  /**
   * The input the fingerprint is taken from, key field included: the validated input, or with
   * `fingerprintInput: 'raw'` the input as sent.
   */
  input: unknown;
  /** The procedure path. */
  path: string;
}

/** Options of `idempotency()`: the `runIdempotent` options, and how to read keys from tRPC calls. */
export interface IdempotencyOptions<Ctx, Tx, TxName extends string = 'tx'>
  extends Omit<
    RunIdempotentOptions<Tx>,
    'scope' | 'key' | 'operation' | 'input' | 'keySource' | 'firstAttempt'
  > {
  /**
   * The principal or tenant a key belongs to, such as `({ ctx }) => ctx.user.id`. Two scopes
   * never see each other's records. Return `null` only with `allowGlobalScope: true`.
   */
  scope: (opts: ScopeOptions<Ctx>) => RunIdempotentOptions['scope'] | Promise<RunIdempotentOptions['scope']>;
  /**
   * The request header that carries the key (case-insensitive).
   * @default 'Idempotency-Key'
   */
  header?: string;
  /**
   * The input field that carries the key. It is left out of the fingerprint, and read from the
   * raw input when the schema does not declare it.
   * @default 'idempotencyKey'
   */
  inputField?: string;
  /**
   * Which input the fingerprint hashes. `'validated'`: the input as the `.input()` validators before
   * the middleware left it (defaults applied, unknown fields stripped), so place the middleware
   * after every `.input()`. `'raw'`: the input as the client sent it (after the transformer), read
   * with `getRawInput()`, so the middleware may sit on a base procedure before the routes'
   * `.input()`: `t.procedure.use(idempotency({ …, fingerprintInput: 'raw' }))`. A raw fingerprint
   * is stricter, never looser: a retry that spells the same input differently (a default written
   * out, an extra field) is `IDEMPOTENCY_KEY_MISMATCH` rather than a replay.
   * @default 'validated'
   */
  fingerprintInput?: 'validated' | 'raw';
  /**
   * Where the request headers are.
   * @default ctx.req.headers (standalone, Node and fetch adapters), else ctx.headers
   */
  getHeaders?: (ctx: Ctx) => HeadersLike | undefined;
  /**
   * The context field the transaction client is put in; `'db'` shadows a `ctx.db` client.
   * @default 'tx'
   */
  txName?: TxName;
  /**
   * Reject mutations without a key with `BAD_REQUEST`. When `false`, they run unrecorded, with
   * `ctx.idempotency` set to `null` and `ctx.tx` as a keyed call would get it (a store
   * transaction, or in lease mode the store's plain client).
   * @default true
   */
  required?: boolean;
}

/** What tRPC passes a middleware, with `ctx` as the middlewares before it left the context. */
type MiddlewareCall<Ctx> = Omit<
  Parameters<TRPCMiddlewareFunction<object, unknown, object, object, unknown>>[0],
  'ctx'
> & { ctx: Ctx };

/**
 * The middleware `idempotency()` returns, for `.use()`. A function of the context it is called
 * with, not tRPC's `TRPCMiddlewareFunction<RootContext, …>`: so `.use()` infers `Ctx` as the
 * context narrowed by the middlewares before it (`ctx.user` non-null after an auth middleware),
 * and `scope` sees that context.
 */
export type IdempotencyMiddleware<Ctx, Tx, TxName extends string = 'tx'> = (
  opts: MiddlewareCall<Ctx>,
) => ReturnType<
  TRPCMiddlewareFunction<object, unknown, object, IdempotencyContextOverrides<Tx, TxName>, unknown>
>;

/**
 * A tRPC v11 middleware that runs a mutation at most once per `(scope, key)` and replays its
 * result to retries. Place it after `.input()`, since it fingerprints the validated input:
 *
 * `t.procedure.input(schema).use(idempotency({ store, scope: ({ ctx }) => ctx.user.id })).mutation(…)`
 *
 * or, with `fingerprintInput: 'raw'`, on a base procedure that routes extend with `.input()`.
 * The resolver gets the store's transaction client as `ctx.tx`: its writes commit with the
 * record, or roll back with it. In lease mode (`mode: 'lease'`, for the middleware, the store or
 * a procedure's `.meta`) `ctx.tx` is the store's plain client instead, and its writes commit on
 * their own. Queries and subscriptions pass through untouched. A request with the header
 * `Idempotency-Attempt: 1` (the shipped clients' first send of a key they made) claims without
 * reading the record first (`firstAttempt`); any other value, or none, changes nothing.
 */
export function idempotency<Ctx, Tx, TxName extends string = 'tx'>(
  options: IdempotencyOptions<Ctx, Tx, TxName>,
): IdempotencyMiddleware<Ctx, Tx, TxName> {
  const {
    scope: scopeOf,
    header = 'Idempotency-Key',
    inputField = 'idempotencyKey',
    fingerprintInput = 'validated',
    getHeaders = requestHeadersOf,
    txName = 'tx' as TxName,
    required = true,
    ...core
  } = options;
  type Result = Awaited<ReturnType<IdempotencyMiddleware<Ctx, Tx, TxName>>>;
  const contextOf = (tx: Tx, idempotency: IdempotencyContext<Tx> | null) =>
    ({ [txName]: tx, idempotency }) as IdempotencyContextOverrides<Tx, TxName>;
  /** What the key's two sources are called in the error when they disagree. */
  const keyNames = { header, input: `${inputField} input` };
  /** Errors of a misplaced middleware: never stored for replay, whatever `replayErrors` says. */
  const misplaced = new WeakSet<object>();
  const { replayErrors } = core;

  return async (opts) => {
    if (opts.type !== 'mutation') return opts.next();
    const { ctx, path } = opts;
    const policy = (opts.meta as IdempotencyMeta | undefined)?.idempotency;
    let replayed = false;
    /** The resolver's own error, thrown into the store, and tRPC's wrapper of it. */
    let failed: { error: unknown; wrapper: TRPCError } | undefined;
    const failure = (wrapper: TRPCError): unknown => {
      failed = { error: resolverErrorOf(wrapper), wrapper };
      return failed.error;
    };
    // Called inside another procedure (a server-side caller made from its context): the
    // request's headers, in and out, are that call's.
    const enclosing = enclosingCallOf(ctx, path, opts.batchIndex);
    // Response headers only for the request's one call: in a batch they would speak for every call.
    const answersRequest = enclosing === undefined && callsInRequest(ctx, opts.batchIndex) === 1;
    const signalReplay = () => {
      if (replayed && answersRequest) setResponseHeader(ctx, 'Idempotent-Replayed', 'true');
    };

    try {
      const { key, input, fingerprinted, keySource, headersSeen, firstAttempt } = await readKey(opts, ctx, {
        header,
        inputField,
        keyNames,
        getHeaders: enclosing === undefined ? getHeaders : () => undefined,
        fingerprintInput,
        keyPolicy: core.keyPolicy,
      });

      const mode = modeOf(core.store, policy?.mode, core.mode);
      if (key === undefined) {
        const keyRequired = policy?.required ?? required;
        // Only the URL said the call runs inside another, and the request has a key header: it may
        // be this call's own (a caller made in a REST route from its request), so it is not dropped.
        const headerUnread =
          enclosing?.fromUrl === true && headerOf(callHeaders(getHeaders(ctx)).headers, header) !== undefined;
        if (keyRequired || headerUnread) {
          throw missingKeyError(
            path,
            header,
            inputField,
            // A string, a number or an array has no field to carry a key in.
            input === undefined || isRecord(input),
            enclosing === undefined ? headersSeen : { ...enclosing, keyRequired },
          );
        }
        return await runUnrecorded(core.store, mode, async (tx) => {
          const result = await opts.next({ ctx: contextOf(tx, null) });
          if (!result.ok) throw failure(result.error);
          return result;
        });
      }

      let ran: Result | undefined;
      const outcome = await runIdempotent(
        withMembers(core, {
          errorCodec: core.errorCodec ?? trpcErrorCodec,
          // Only when some error may be kept: a policy in transactional mode costs a savepoint.
          replayErrors:
            mode === 'lease' || replayErrors !== undefined
              ? (error: unknown) =>
                  // An `.output()` after the middleware refused the result. In lease mode its
                  // effects stand, so the refusal answers for the key, as a result that cannot be
                  // stored does; in transactional mode they roll back, so nothing is kept.
                  isOutputRefusal(error)
                    ? mode === 'lease'
                    : replayErrors !== undefined &&
                      !misplaced.has(error as object) &&
                      !(fingerprintInput === 'raw' && isInputRefusal(error)) &&
                      replayErrors(error)
              : undefined,
          ttlMs: policy?.ttlMs ?? core.ttlMs,
          mode,
          leaseMs: policy?.leaseMs ?? core.leaseMs,
          heartbeatMs: policy?.heartbeatMs ?? core.heartbeatMs,
          scope: await scopeOf({ ctx, input, path }),
          key,
          operation: path,
          input: fingerprinted,
          keySource,
          firstAttempt,
          onEvent: (event: IdempotencyEvent) => {
            if (event.type === 'replayed') replayed = true;
            core.onEvent?.(event);
          },
        } satisfies Partial<RunIdempotentOptions<Tx>>),
        async (tx, claim) => {
          const { fingerprint, firstSeenAt, step = stepsNeedLeaseMode } = claim;
          const context = contextOf(tx, { key, replayed: false, fingerprint, firstSeenAt, step });
          const result =
            fingerprintInput === 'raw'
              ? await opts.next({ ctx: context })
              : await opts.next({
                  ctx: context,
                  // An `.input()` after this middleware would add input the fingerprint did not
                  // cover (a retry with another value would replay): it reads the raw input, and
                  // the call fails here, before the resolver runs and with nothing stored. Any
                  // other reader of the raw input looks the same from here, and fails too.
                  getRawInput: async (): Promise<never> => {
                    const error = new TRPCError({
                      code: 'INTERNAL_SERVER_ERROR',
                      message: `idempotency() on "${path}" runs before something that reads the raw input, an .input() or a middleware calling getRawInput(): place .use(idempotency(…)) after every .input(…) and such middleware, so the fingerprint hashes the whole validated input, or set fingerprintInput: 'raw' to hash the input as sent (a base procedure that routes extend with .input())`,
                    });
                    misplaced.add(error);
                    throw error;
                  },
                } as { ctx: typeof context });
          // tRPC hands back the resolver's error instead of throwing it: throwing it here is
          // what rolls the transaction back. The resolver's own error, not tRPC's wrapper, is
          // what the store retries on (a write conflict) and what `replayErrors` judges.
          if (!result.ok) throw failure(result.error);
          ran = result;
          return result.data;
        },
      );
      if (!outcome.replayed) return ran!;
      signalReplay();
      // The shape `next()` returns; tRPC reads only `ok` and `data` from it.
      return { ok: true, data: outcome.value } as Result;
    } catch (error) {
      signalReplay();
      // The client gets the resolver's failure as tRPC answered it, unless a step raised it (its
      // lease lost: a 409 only while the key's record answers), answered as ours. Any other error
      // of ours the resolver threw (a nested call's 409) is its own: its effects may have happened.
      if (failed && error === failed.error && !raisedBySteps(error)) throw resolversOwn(failed.wrapper);
      if (!isIdempotencyError(error)) throw error;
      if (answersRequest) {
        for (const [name, value] of Object.entries(httpAnswerOf(error).headers ?? {})) {
          setResponseHeader(ctx, name, value);
        }
      }
      throw toTRPCError(error);
    }
  };
}

/**
 * A missing key. When the context shows no request headers at all, the client may well have sent
 * the header: `createContext` did not pass the request on, and the message says so.
 */
function missingKeyError(
  path: string,
  header: string,
  inputField: string,
  /** Whether the input could carry the key (an object, or none): not a string, a number or an array. */
  inputCarries: boolean,
  headersSeen: HeadersSeen | (EnclosingCall & { keyRequired: boolean }),
): IdempotencyKeyMissingError {
  const field = inputCarries ? `the "${inputField}" input field` : undefined;
  /** For an input that cannot carry a key. */
  const objectInput = `give "${path}" an object input, whose "${inputField}" field can carry it`;
  if (typeof headersSeen === 'object' && !headersSeen.fromUrl) {
    return new IdempotencyKeyMissingError(
      `"${path}" requires an idempotency key: it runs inside "${headersSeen.path}" (a server-side caller made from its context), whose ${header} header is that call's, not this one's, so ${field ? `pass the key in ${field}` : objectInput}`,
    );
  }
  if (typeof headersSeen === 'object') {
    return new IdempotencyKeyMissingError(
      `"${path}" ${headersSeen.keyRequired ? 'requires an idempotency key' : `cannot tell whether the ${header} header is its key`}: the request URL (ctx.req.url; createContext passed no info on) calls "${headersSeen.path}", so this looks like a server-side caller made from that call's context, whose ${header} header is that call's, not this one's. ${field ? `Pass the key in ${field}` : objectInput[0]!.toUpperCase() + objectInput.slice(1)}; or, if this call is the request's own, pass createContext's info on (createContext: ({ req, res, info }) => ({ req, res, info, … })), or give a caller made outside a tRPC request (a REST route) the request's headers without its URL ({ headers: req.headers })`,
    );
  }
  if (headersSeen === 'seen') {
    return new IdempotencyKeyMissingError(
      `"${path}" requires an idempotency key: send the ${header} header${field ? ` or ${field}` : ''}`,
    );
  }
  if (headersSeen === 'socket') {
    return new IdempotencyKeyMissingError(
      `"${path}" requires an idempotency key: over a WebSocket a call has no headers of its own (the upgrade request's speak for every call on the socket), so ${field ? `send the key in ${field}` : objectInput}`,
    );
  }
  return new IdempotencyKeyMissingError(
    `"${path}" requires an idempotency key, and idempotency() cannot see the request headers, so a ${header} header would not be read: the context has no req.headers or headers. Pass the request on from createContext, e.g. createContext: ({ req, res, info }) => ({ req, res, info, … }), or set getHeaders${field ? `; or send the key in ${field} (as server-side callers do)` : ''}`,
  );
}

/** Codes whose status clients retry (409, 503, 429). */
const RETRIED_CODES = new Set<string>(['CONFLICT', 'SERVICE_UNAVAILABLE', 'TOO_MANY_REQUESTS']);

/**
 * The resolver's failure as the client gets it: as tRPC answered it, except a nested call's answer
 * of ours the resolver let through, thrown bare or as the `TRPCError` a server-side caller made of
 * it with a status clients retry: `INTERNAL_SERVER_ERROR`, with no idempotency code
 * (`idempotencyErrorData`), since this resolver may have acted before it. A code the resolver chose
 * itself that asks for no retry (a `BAD_REQUEST` with ours as its cause) stays.
 */
function resolversOwn(wrapper: TRPCError): TRPCError {
  if (!carriesIdempotencyError(wrapper)) return wrapper;
  if (wrapper.code !== 'INTERNAL_SERVER_ERROR' && !RETRIED_CODES.has(wrapper.code)) return wrapper;
  return new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: wrapper.message, cause: wrapper });
}

/**
 * What the resolver threw. tRPC turns anything but a `TRPCError` into an `INTERNAL_SERVER_ERROR`
 * whose `cause` is the thrown error and whose stack is that error's own stack
 * (`getTRPCErrorFromUnknown`): exactly that wrapper is unwrapped. A thrown object that is not an
 * `Error` is gone: tRPC's cause is a copy of its fields (its `UnknownCauseError`) and the wrapper
 * takes the copy's message, which is the closest there is to it. A `TRPCError` the resolver threw
 * itself, even one wrapping another error, has a stack of its own, and a message of its own when
 * its cause is not an `Error`, and stays as it is.
 */
function resolverErrorOf(error: TRPCError): unknown {
  const { cause } = error;
  if (error.code !== 'INTERNAL_SERVER_ERROR' || !(cause instanceof Error) || cause instanceof TRPCError) {
    return error;
  }
  if (typeof cause.stack === 'string' && error.stack === cause.stack) return cause;
  const copied = cause.constructor.name === 'UnknownCauseError' && error.message === cause.message;
  return copied ? cause : error;
}

/** Whether a call's request headers were there to read, or were a WebSocket's upgrade request's. */
type HeadersSeen = 'seen' | 'none' | 'socket';

/**
 * The call's key, from the header or the input field, and the input to fingerprint (without the
 * key field). A header key on a batch of several calls could belong to any of them: refused. The
 * attempt header speaks for the whole request, so for every call in a batch.
 */
async function readKey<Ctx>(
  call: { input: unknown; getRawInput: () => Promise<unknown>; batchIndex: number },
  ctx: Ctx,
  options: Pick<IdempotencyOptions<Ctx, unknown>, 'keyPolicy'> & {
    header: string;
    inputField: string;
    /** What the key's two sources are called in the error when they disagree. */
    keyNames: { header: string; input: string };
    fingerprintInput: 'validated' | 'raw';
    getHeaders: (ctx: Ctx) => HeadersLike | undefined;
  },
): Promise<{
  key: string | undefined;
  /** The input `scope` sees: the validated input, or the raw one with `fingerprintInput: 'raw'`. */
  input: unknown;
  fingerprinted: unknown;
  keySource: 'header' | 'input';
  /** Whether the context had request headers to read. */
  headersSeen: HeadersSeen;
  /** The client's `Idempotency-Attempt: 1`: it has not sent this key before. */
  firstAttempt: boolean;
}> {
  const { header, inputField, keyNames, keyPolicy } = options;
  const { headers, overSocket } = callHeaders(options.getHeaders(ctx));
  const headerKey = parseKeyHeader(headerOf(headers, header), keyPolicy, header);
  refuseHeaderKeyOnBatch(
    headerKey,
    callsInRequest(ctx, call.batchIndex) > 1,
    header,
    `send the key in each call's "${inputField}" input`,
  );
  // Both present means both agree (`resolveKey` refuses otherwise): the header is named.
  const keySource = headerKey !== undefined ? 'header' : 'input';
  const headersSeen: HeadersSeen = overSocket ? 'socket' : headers !== undefined ? 'seen' : 'none';
  const firstAttempt = isFirstAttempt(headerOf(headers, ATTEMPT_HEADER));
  const raw = options.fingerprintInput === 'raw';
  const input = raw ? await call.getRawInput() : call.input;
  if (isRecord(input) && Object.hasOwn(input, inputField)) {
    const { [inputField]: inputKey, ...rest } = input;
    const key = resolveKey(headerKey, inputKey, keyPolicy, keyNames);
    return { key, input, fingerprinted: rest, keySource, headersSeen, firstAttempt };
  }
  // A schema that does not declare the field strips it, and a procedure without `.input()` has
  // no validated input at all: read the key from what the client sent.
  const sent = raw ? input : await call.getRawInput();
  const sentKey = isRecord(sent) && Object.hasOwn(sent, inputField) ? sent[inputField] : undefined;
  return {
    key: resolveKey(headerKey, sentKey, keyPolicy, keyNames),
    input,
    fingerprinted: input,
    keySource,
    headersSeen,
    firstAttempt,
  };
}

/**
 * tRPC's refusal of a resolver's result by an `.output()` validator after the middleware
 * (`createOutputMiddleware`'s error): the resolver ran and returned.
 */
function isOutputRefusal(error: unknown): boolean {
  return (
    error instanceof TRPCError &&
    error.code === 'INTERNAL_SERVER_ERROR' &&
    error.message === 'Output validation failed'
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
