import type { Plugin } from '@envelop/core';
import {
  type DocumentNode,
  defaultFieldResolver,
  type ExecutionArgs,
  type ExecutionResult,
  type GraphQLError,
  type GraphQLFieldResolver,
  type GraphQLSchema,
  getArgumentValues,
  getOperationAST,
  getVariableValues,
  locatedError,
  type OperationDefinitionNode,
  print,
} from 'graphql';
import { ATTEMPT_HEADER, isFirstAttempt } from '../core/attempt-header.js';
import { observedError } from '../core/call-tracking.js';
import {
  IdempotencyInputError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMissingError,
  isIdempotencyError,
  isMisuse,
} from '../core/errors.js';
import { callHeaders, type HeadersLike, headerOf } from '../core/headers.js';
import { type HeaderValue, parseKeyHeader, refuseHeaderKeyOnBatch, resolveKey } from '../core/key.js';
import {
  type ErrorCodec,
  type IdempotentResult,
  type ResolverClaim,
  type RunIdempotentOptions,
  runIdempotent,
} from '../core/run-idempotent.js';
import { superjsonSerializer } from '../core/serializer.js';
import { raisedBySteps, type Step, stepsNeedLeaseMode } from '../core/steps.js';
import { modeOf, runUnrecorded } from '../core/unrecorded.js';
import { withMembers } from '../core/with-members.js';
import { type IdempotentField, idempotentFieldsOf } from './directive.js';
import { carriesOurCode, graphqlErrorCodec, toGraphQLError, withoutRetryStatus } from './graphql-error.js';
import { refusingReadThroughCode } from './read-through-code.js';
import { copySchema } from './schema-copy.js';
import {
  defersOrStreams,
  type IdempotentSelection,
  idempotentSelections,
  keyArgumentBelowRoot,
  mutationTypeIsNested,
} from './selections.js';

/** Matches every field of the mutation type (to find any selected below the root). */
const anyField = { has: () => true, size: 1 };

/** What `scope` may return: a principal, or `null` for the global scope (with `allowGlobalScope`). */
export type ScopeValue = string | number | null | undefined;

/** Options of `useIdempotency`; the core's options (`store`, `ttlMs`, `onEvent`, …) pass through. */
// biome-ignore lint/suspicious/noExplicitAny: an unannotated `scope` may read any context member.
export interface UseIdempotencyOptions<Context = any, Tx = unknown>
  extends Omit<
    RunIdempotentOptions<Tx>,
    'scope' | 'key' | 'operation' | 'input' | 'keySource' | 'firstAttempt'
  > {
  /**
   * The principal or tenant a key belongs to, read from the GraphQL context (e.g. the user id).
   * Two principals that send the same key never see each other's records.
   */
  scope: (context: Context) => ScopeValue | Promise<ScopeValue>;
  /**
   * The request header whose key makes a whole mutation operation idempotent, read from
   * `context.request` (Yoga, Fetch API) or `context.req` (Node). `false` reads no header.
   * @default 'Idempotency-Key'
   */
  header?: string | false | undefined;
  /**
   * The argument that makes a root mutation field idempotent on its own and carries its key.
   * @default 'idempotencyKey'
   */
  argumentName?: string | undefined;
  /**
   * The context member the resolver finds the transaction client in (in lease mode, the store's
   * plain client).
   * @default 'tx'
   */
  txName?: string | undefined;
  /**
   * Whether a field that has the key argument but no `@idempotent(required:)` rejects a call
   * without a key (`IDEMPOTENCY_KEY_MISSING`); when `false` such a call runs unrecorded, with
   * `context.tx` as a keyed call would get it (a store transaction, or in lease mode the store's
   * plain client).
   * @default true
   */
  required?: boolean | undefined;
  /**
   * `transactional` or `lease`, as in `runIdempotent`, for every idempotent field without an
   * `@idempotent(mode:)` of its own (those fields also fall back to the store's default mode).
   * Operations under an `Idempotency-Key` header run in lease mode only when this says `'lease'`:
   * in a transaction an operation is all or nothing, while under a lease the writes of fields
   * that succeeded stay when another field fails, and the released key runs them all again. A
   * header key on an operation selecting a field whose `@idempotent(mode:)` is another mode is
   * refused (`IDEMPOTENCY_KEY_INVALID`): that field's key goes in its argument instead.
   * @default the store's `defaults.mode` for fields, 'transactional' for header keys
   */
  mode?: RunIdempotentOptions['mode'] | undefined;
  /**
   * How replayable errors (see `replayErrors`) are stored and rebuilt.
   * @default the core's codec, keeping a `GraphQLError`'s `extensions`
   */
  errorCodec?: ErrorCodec | undefined;
}

/**
 * What `extensions.idempotency` says about a record. Operation-level (header) keys put one at
 * `extensions.idempotency`; field-level keys put one per root field under its response name
 * (alias or field name): `extensions.idempotency.createOrder`.
 */
export interface IdempotencyExtension {
  /** The idempotency key the record is kept under. */
  key: string;
  /** `true` when the result was replayed and the resolvers did not run. */
  replayed: boolean;
  /** When the key was first claimed (ISO 8601). */
  firstSeenAt: string;
  /** Until when the result is replayed (ISO 8601). */
  expiresAt: string;
}

/** What one mutation's execution shares with its idempotent fields, through its root value. */
interface Execution {
  /** The header's key, when it claims the whole operation. */
  operationKey?: string;
  /** The request's `Idempotency-Attempt: 1`: the client has not sent its keys before. */
  firstAttempt: boolean;
  /**
   * Which statuses of a field's error may be the whole response's (see `Speaks`); worked out when
   * an error first asks, since an operation that fails nothing never needs it.
   */
  speaks(): Speaks;
  fields: Map<string | number, IdempotencyExtension>;
}

/** Which statuses of a field's error may be the whole response's (`toGraphQLError`). */
interface Speaks {
  /**
   * A status that asks for a retry (a 409 with `Retry-After`, a 503): only when a retry of the
   * operation runs nothing again.
   */
  retrySafe: boolean;
  /**
   * Any other status (a 400, a 422, a 500): only when the field is all the request runs. Beside
   * other fields, which may have run and committed, it would tell a client that the whole request
   * failed.
   */
  answersRequest: boolean;
}

/** A schema as this plugin runs its mutations. */
interface Prepared {
  /** A copy of the schema whose idempotent root mutation fields run through this plugin. */
  schema: GraphQLSchema;
  /** The idempotent fields of the mutation type, by name. */
  fields: ReadonlyMap<string, IdempotentField>;
  /** Whether a field returns the mutation type, so that its fields can be selected below the root. */
  nested: boolean;
  /** Where each operation of a document selects `fields` (see `selectionsOf`). */
  selections: WeakMap<DocumentNode, Map<OperationDefinitionNode, readonly IdempotentSelection[]>>;
}

/**
 * Yoga's request-parsing hook, typed by its shape (this folder does not import Yoga). Envelop
 * servers without request batching never call it.
 */
interface RequestParseHook {
  onRequestParse(payload: { request: object }): {
    onRequestParseDone(payload: { requestParserResult: unknown }): void;
  };
}

/** Every `useIdempotency` plugin, so that two in one server are refused. */
const instances = new WeakSet<object>();

/**
 * Makes GraphQL mutations idempotent, for Yoga or any Envelop-based server.
 *
 * - **Field-level:** a root mutation field with the `idempotencyKey` argument or `@idempotent`
 *   runs at most once per key; each such field of an operation claims its own key. Its resolver
 *   runs inside the claim's transaction and finds the transaction client at `context.tx`; under
 *   `@idempotent(mode: LEASE)` (or `mode: 'lease'`) it runs outside any transaction and
 *   `context.tx` is the store's plain client, and `context.idempotency.step(name, fn)` runs
 *   durable steps (`IdempotencyResolverContext`). Selected anywhere but at the root of a mutation
 *   (below another field, or from a query), such a field is refused before anything runs.
 * - **Operation-level:** an `Idempotency-Key` header on a mutation operation claims the whole
 *   operation: it executes inside one transaction and its result is replayed verbatim.
 *
 * A request with the header `Idempotency-Attempt: 1` (the shipped clients' first send of a key they
 * made) claims its keys without reading their records first (`firstAttempt`); any other value, or
 * none, changes nothing.
 *
 * Queries and subscriptions are otherwise never touched, nor are mutations that select no idempotent
 * field and carry no header key. The user's schema is never changed: the other mutations execute
 * against a copy of it that this plugin makes (once per schema), whose idempotent root fields run
 * through it; each `useIdempotency` has its own copy, store and scope.
 */
// biome-ignore lint/suspicious/noExplicitAny: as in the options.
export function useIdempotency<Context = any, Tx = unknown>({
  scope,
  header = 'Idempotency-Key',
  argumentName = 'idempotencyKey',
  txName = 'tx',
  required = true,
  errorCodec = graphqlErrorCodec,
  ...core
}: UseIdempotencyOptions<Context, Tx>): Plugin & RequestParseHook {
  /**
   * Each mutation execution's state, by the root value of its own that it runs with (`rootOf`):
   * the context may be shared by concurrent executions, and is the user's.
   */
  const executions = new WeakMap<object, Execution>();
  /** Requests that Yoga parsed into a batch of several operations (`batching: true`). */
  const batches = new WeakSet<object>();
  const prepared = new WeakMap<GraphQLSchema, Prepared>();
  /** How operations under a header key run. */
  const operationMode = core.mode ?? 'transactional';
  /** What a key's two sources are called in the error when they disagree. */
  const keyNames = { header: String(header), input: `${argumentName} argument` };
  /** A field key stores its resolver's value, which graphql-js reads on: only plain data replays. */
  const fieldSerializer = refusingReadThroughCode(
    core.serializer ?? core.store.serializer ?? superjsonSerializer(),
  );
  /** A field's error is kept as the user's `replayErrors` says, unless it carries one of our codes. */
  const { replayErrors } = core;
  const fieldReplayErrors =
    replayErrors && ((error: unknown) => !carriesOurCode(error) && replayErrors(error));

  /** Checks the schema's idempotent fields (throwing on misdeclared ones) and makes its copy. */
  function prepare(schema: GraphQLSchema): Prepared {
    let done = prepared.get(schema);
    if (done) return done;
    const fields = new Map<string, IdempotentField>();
    for (const [field, options] of idempotentFieldsOf(schema, argumentName, modeOf(core.store, core.mode))) {
      fields.set(field.name, options);
    }
    const mutationType = schema.getMutationType();
    done = {
      schema:
        fields.size === 0
          ? schema
          : copySchema(schema, (type, name, resolve) => {
              const field = type === mutationType ? fields.get(name) : undefined;
              return field ? idempotentResolver(resolve ?? defaultFieldResolver, field) : resolve;
            }),
      fields,
      nested: mutationTypeIsNested(schema),
      selections: new WeakMap(),
    };
    prepared.set(schema, done);
    return done;
  }

  /**
   * Where `operation` selects the schema's idempotent fields (`idempotentSelections`), walked once
   * per document: Yoga's parser cache hands every request that sends the same text the same one.
   */
  function selectionsOf(
    { fields, selections }: Prepared,
    schema: GraphQLSchema,
    document: DocumentNode,
    operation: OperationDefinitionNode,
  ): readonly IdempotentSelection[] {
    let byOperation = selections.get(document);
    if (byOperation === undefined) {
      byOperation = new Map();
      selections.set(document, byOperation);
    }
    let found = byOperation.get(operation);
    if (found === undefined) {
      found = idempotentSelections(schema, document, operation, fields);
      byOperation.set(operation, found);
    }
    return found;
  }

  /**
   * Refuses, before anything runs, an operation whose idempotent fields could not keep their
   * promise: one selected below the root without a header key (it would run without a key), or,
   * under a header key, one whose `@idempotent(mode:)` is not the mode the operation runs in.
   * Returns how many idempotent fields the operation selects.
   */
  function checkSelections(
    prepared: Prepared,
    schema: GraphQLSchema,
    document: DocumentNode,
    operation: OperationDefinitionNode,
    key: string | undefined,
  ): number {
    const { fields, nested } = prepared;
    const coordinate = (name: string) => `${schema.getMutationType()?.name}.${name}`;
    const selections = selectionsOf(prepared, schema, document, operation);
    if (nested && key === undefined && selections.some((selection) => selection.atRoot)) {
      // A mutation field below a keyed root field runs again on every retry (its parent is
      // replayed, and it resolves anew on the replayed value).
      const below = idempotentSelections(schema, document, operation, anyField).find((s) => !s.atRoot);
      if (below && !fields.has(below.fieldName)) {
        throw new IdempotencyKeyInvalidError(
          `${coordinate(below.fieldName)} is selected below the root of a mutation with idempotency keys: it would run again on every retry. Select it as a root field` +
            (header ? `, or send the whole operation with an ${header} header` : ''),
        );
      }
    }
    for (const { fieldName, atRoot } of selections) {
      if (key === undefined && !atRoot) {
        throw new IdempotencyKeyInvalidError(
          `${coordinate(fieldName)} is idempotent only as a root field of a mutation; select it there, with its "${argumentName}" argument` +
            (header && operation.operation === 'mutation'
              ? `, or send the whole operation with an ${header} header`
              : ''),
        );
      }
      // The mode the field runs in with its own key: its directive's, the plugin's, the store's.
      const mode = modeOf(core.store, fields.get(fieldName)?.mode, core.mode);
      if (key !== undefined && mode !== operationMode) {
        throw new IdempotencyKeyInvalidError(
          `${coordinate(fieldName)} runs in ${mode} mode, but an ${header} header runs the whole operation in ${operationMode} mode: send its key as its "${argumentName}" argument instead of the header`,
        );
      }
    }
    if (key === undefined && operation.operation === 'mutation') {
      let below = keyedBelowRoot.get(operation);
      if (below === undefined) {
        below = keyArgumentBelowRoot(document, operation, argumentName) ?? null;
        keyedBelowRoot.set(operation, below);
      }
      if (below !== null) {
        throw new IdempotencyKeyInvalidError(
          `"${below}" is given an "${argumentName}" argument below the root of the mutation, where no key is read (a namespaced mutation): it would run again on every retry. Give the key to a root field of the mutation type` +
            (header ? `, or send the whole operation with an ${header} header` : ''),
        );
      }
    }
    return selections.length;
  }

  /** Per operation, the first field below its root given a key argument (`keyArgumentBelowRoot`), or null. */
  const keyedBelowRoot = new WeakMap<OperationDefinitionNode, string | null>();

  function idempotentResolver(
    resolve: GraphQLFieldResolver<unknown, unknown>,
    field: IdempotentField,
  ): GraphQLFieldResolver<unknown, unknown> {
    const keyRequired = field.required ?? required;
    const mode = modeOf(core.store, field.mode, core.mode);

    return async (source, args, context, info) => {
      const coordinate = `${info.parentType.name}.${info.fieldName}`;
      // Root fields get the execution's root value; under a header key, every field gets the
      // operation's own context.
      const state = executions.get(source as object) ?? executions.get(context as object);
      /** What the field's own resolver threw (or returned as its error, see `settled`), if any. */
      let thrown: { error: unknown } | undefined;
      const resolveField = async (fieldContext: unknown, settle = true) => {
        try {
          const value = await resolve(source, args, fieldContext, info);
          return settle ? await settled(value) : value;
        } catch (error) {
          thrown = { error };
          throw error;
        }
      };
      try {
        if (state?.operationKey !== undefined) {
          // The header's key claims the whole operation; this field runs in its transaction.
          resolveKey(state.operationKey, args[argumentName], core.keyPolicy, keyNames);
          return await resolveField(context, false);
        }
        // Refused before execution already (`checkSelections`).
        if (info.path.prev !== undefined) {
          throw new IdempotencyKeyInvalidError(
            `${coordinate} is idempotent only as a root field of a mutation`,
          );
        }
        const key = resolveKey(undefined, args[argumentName], core.keyPolicy);
        if (key === undefined) {
          if (keyRequired) {
            const { overSocket } = callHeaders(requestHeadersOf(context));
            throw new IdempotencyKeyMissingError(
              `${coordinate} requires an idempotency key: send the "${argumentName}" argument` +
                (header && !overSocket ? ` or the ${header} header` : '') +
                (overSocket ? ' (over a WebSocket an operation has no headers of its own)' : ''),
            );
          }
          // An `Error` it returns is its error, as with a key: its writes roll back.
          return await runUnrecorded(core.store, mode, async (tx) =>
            resolveField(withTransaction(context, txName, tx)),
          );
        }
        const { [argumentName]: _key, ...input } = args;
        const outcome = await runIdempotent(
          withMembers(core, {
            errorCodec,
            replayErrors: fieldReplayErrors,
            serializer: fieldSerializer,
            ttlMs: field.ttlMs ?? core.ttlMs,
            mode,
            leaseMs: field.leaseMs ?? core.leaseMs,
            scope: await scope(context as Context),
            key,
            operation: coordinate,
            input,
            keySource: 'argument',
            firstAttempt: state?.firstAttempt ?? false,
          } satisfies Partial<RunIdempotentOptions<Tx>>),
          async (tx, claim) => resolveField(withClaim(context, txName, tx, claim)),
        );
        state?.fields.set(info.path.key, extensionOf(outcome));
        return outcome.value;
      } catch (error) {
        // The resolver's own error stays its own, an error of ours it threw too (a nested call's
        // 409): it may have acted before it, so no status that asks for a retry. A step's (its lease
        // lost) speaks for this key: answered as ours.
        if (thrown?.error === error && !raisedBySteps(error)) throw withoutRetryStatus(error);
        throw toGraphQLError(error, state?.speaks() ?? { retrySafe: false, answersRequest: false });
      }
    };
  }

  /**
   * Refuses, before anything runs, an operation under a header key whose idempotent fields give
   * a key of their own that is not the header's (`resolveKey` says why). Each field checks again
   * as it runs, but fields run one after another: under a lease the effects of those before it
   * would stay, and the released key would run them again.
   */
  function refuseOtherFieldKeys(
    { schema, document }: ExecutionArgs,
    operation: OperationDefinitionNode,
    variables: Record<string, unknown>,
    key: string,
  ): void {
    const fields = schema.getMutationType()?.getFields() ?? {};
    for (const { fieldName, node } of selectionsOf(prepare(schema), schema, document, operation)) {
      let fieldKey: unknown;
      try {
        fieldKey = getArgumentValues(fields[fieldName]!, node, variables)[argumentName];
      } catch {
        continue; // arguments the execution refuses itself, before its resolver runs
      }
      resolveKey(key, fieldKey, core.keyPolicy, keyNames);
    }
  }

  /** Runs a whole mutation operation under the header's key, inside one transaction. */
  async function runOperation(
    execute: (args: ExecutionArgs) => unknown,
    args: ExecutionArgs,
    operation: OperationDefinitionNode,
    state: Execution & { operationKey: string },
  ): Promise<unknown> {
    const { operationKey: key, firstAttempt } = state;
    const variables = getVariableValues(args.schema, operation.variableDefinitions ?? [], {
      ...args.variableValues,
    });
    // Invalid variables fail the execution before any resolver runs: nothing to claim.
    if (variables.errors) return execute(args);
    const operationName = operation.name?.value ?? null;
    const failed = failedOperationCodec(errorCodec);
    try {
      refuseOtherFieldKeys(args, operation, variables.coerced, key);
      const outcome = await runIdempotent(
        withMembers(core, {
          mode: operationMode,
          scope: await scope(args.contextValue as Context),
          key,
          operation: `mutation ${operationName ?? '(anonymous)'}`.slice(0, 255),
          keySource: 'header',
          firstAttempt,
          input: { document: print(args.document), operationName, variables: variables.coerced },
          // Stored only when the user's `replayErrors` accepts every error of the operation, and
          // none is an error of ours a field threw (a nested call's, about another key), nor one
          // the library threw at code that calls it wrongly (a step in transactional mode).
          replayErrors:
            core.replayErrors &&
            ((error: unknown) =>
              error instanceof FailedOperation &&
              error.errors.every(
                (e) =>
                  !carriesOurCode(e) &&
                  !isMisuse(e.originalError) &&
                  (core.replayErrors?.(e.originalError ?? e) ?? false),
              )),
          errorCodec: failed,
        } satisfies Partial<RunIdempotentOptions<Tx>>),
        async (tx, claim) => {
          const contextValue = withClaim(args.contextValue, txName, tx, claim);
          // The context is this execution's own: fields below the root find the key through it.
          executions.set(contextValue, state);
          // Without the request's signal (Yoga's `useExecutionCancellation`): a client gone away
          // must not make the executor reject after the fields ran, which would roll them back or,
          // under a lease, free the key for the retry to run them again.
          const { signal: _signal, ...unsignalled } = args as ExecutionArgs & { signal?: unknown };
          const result = await execute({ ...unsignalled, contextValue });
          if (isAsyncIterable(result)) {
            // `@defer` and `@stream` were refused before execution; an executor that streams for
            // another reason ends here, after its fields ran.
            await result[Symbol.asyncIterator]().return?.();
            throw new IdempotencyInputError('An idempotent operation cannot use @defer or @stream');
          }
          const { data, errors, extensions } = result as ExecutionResult;
          // A step's answer about the key (its lease lost: a 409) speaks for the operation, as ours.
          const fromSteps = errors?.find((error) => raisedBySteps(error.originalError));
          if (fromSteps) throw fromSteps.originalError;
          // Any error rolls the whole operation back, so the data that came with it never happened
          // (under a lease, see `mode`, the key is released instead).
          if (errors?.length) throw new FailedOperation(errors.map(withoutRetryStatus));
          // The JSON form is what the client saw; a replay sends exactly it again. A result JSON
          // cannot write (a BigInt from a scalar) rolls a transaction back; under a lease, whose
          // effects have happened, it is stored as it is, and its replay fails as the answer does.
          const answered = { data, extensions };
          try {
            return JSON.parse(JSON.stringify(answered)) as ExecutionResult;
          } catch (error) {
            if (operationMode === 'lease') return answered;
            throw error;
          }
        },
      );
      return withExtension(outcome.value, extensionOf(outcome));
    } catch (error) {
      if (error instanceof FailedOperation) return { data: null, errors: error.errors };
      if (isIdempotencyError(error)) return { errors: [toGraphQLError(error)] };
      throw error;
    }
  }

  const plugin: Plugin & RequestParseHook = {
    onPluginInit({ plugins }) {
      if (plugins.filter((other) => instances.has(other)).length > 1) {
        throw new Error(
          'useIdempotency: this server has more than one useIdempotency plugin; use one per server (each would claim keys for the same mutations)',
        );
      }
    },
    onSchemaChange({ schema }) {
      prepare(schema);
    },
    onRequestParse({ request }) {
      return {
        onRequestParseDone({ requestParserResult }) {
          if (Array.isArray(requestParserResult) && requestParserResult.length > 1) batches.add(request);
        },
      };
    },
    onSubscribe({ args, setResultAndStopExecution }) {
      const operation = getOperationAST(args.document, args.operationName);
      if (operation) refuseUnkeyedReach(args, operation, setResultAndStopExecution);
    },
    onExecute({ args, executeFn, setExecuteFn, setResultAndStopExecution }) {
      const operation = getOperationAST(args.document, args.operationName);
      if (!operation) return;
      if (operation.operation !== 'mutation') {
        refuseUnkeyedReach(args, operation, setResultAndStopExecution);
        return;
      }
      const schema = prepare(args.schema);
      const refuse = (error: unknown) =>
        setResultAndStopExecution({ errors: [toGraphQLError(error) as GraphQLError] });
      let key: string | undefined;
      let selected: number;
      try {
        key = header
          ? parseKeyHeader(contextHeader(args.contextValue, header), core.keyPolicy, header)
          : undefined;
        refuseHeaderKeyOnBatch(
          key,
          isBatched(args.contextValue),
          String(header),
          `send each mutation its own "${argumentName}" argument`,
        );
        selected = checkSelections(schema, args.schema, args.document, operation, key);
        if (key !== undefined && defersOrStreams(args.document, operation)) {
          // Refused before anything runs: under a lease the effects of the fields that ran first
          // would stay, and the released key would run them again on the retry.
          throw new IdempotencyInputError(
            `An operation under an ${header} header cannot use @defer or @stream: its result is stored and replayed whole`,
          );
        }
      } catch (error) {
        refuse(error);
        return;
      }
      const firstAttempt = isFirstAttempt(contextHeader(args.contextValue, ATTEMPT_HEADER));
      let speaks: Speaks | undefined;
      const state: Execution = {
        operationKey: key,
        firstAttempt,
        fields: new Map(),
        speaks: () => {
          if (speaks === undefined) {
            const sole = key === undefined && selected > 0 ? soleRootField(args, operation) : undefined;
            speaks = {
              retrySafe: key !== undefined || (sole !== undefined && keyedField(args, operation, sole)),
              answersRequest: key !== undefined || sole !== undefined,
            };
          }
          return speaks;
        },
      };
      // Mutations run on this plugin's copy of the schema, whose idempotent fields it wraps, with
      // a root value of their own through which those fields find this execution's state.
      const execute = (executeArgs: ExecutionArgs) => {
        const rootValue = rootOf(executeArgs.rootValue);
        executions.set(rootValue, state);
        return executeFn(withMembers(executeArgs, { schema: prepare(executeArgs.schema).schema, rootValue }));
      };
      if (key === undefined) {
        // Selecting no idempotent field, the mutation runs as it would without this plugin, unless
        // a plugin after this one executes it on another schema, checked as before.
        setExecuteFn(
          selected === 0
            ? (executeArgs: ExecutionArgs) =>
                executeArgs.schema === args.schema ? executeFn(executeArgs) : execute(executeArgs)
            : execute,
        );
        // Each field's record goes with the first result sent after it ran (with @defer, a root
        // field may run after the first result).
        const reported = new Set<string | number>();
        const withFields = (result: unknown, setResult: (result: ExecutionResult) => void) => {
          const fields = [...state.fields].filter(([name]) => !reported.has(name));
          if (fields.length === 0) return;
          for (const [name] of fields) reported.add(name);
          setResult(withExtension(result, Object.fromEntries(fields)));
        };
        return {
          onExecuteDone({ result, setResult }) {
            if (!isAsyncIterable(result)) return withFields(result, setResult);
            return { onNext: ({ result, setResult }) => withFields(result, setResult) };
          },
        };
      }
      const operationState = { ...state, operationKey: key };
      setExecuteFn((executeArgs: ExecutionArgs) =>
        runOperation(execute, executeArgs, operation, operationState),
      );
    },
  };
  instances.add(plugin);
  return plugin;

  /**
   * Refuses a query or a subscription that reaches the mutation type below its root: it would run
   * the idempotent fields there without a key (a subscription on every event).
   */
  function refuseUnkeyedReach(
    args: ExecutionArgs,
    operation: OperationDefinitionNode,
    setResultAndStopExecution: (result: ExecutionResult) => void,
  ): void {
    const schema = prepare(args.schema);
    if (!schema.nested) return;
    try {
      checkSelections(schema, args.schema, args.document, operation, undefined);
    } catch (error) {
      setResultAndStopExecution({ errors: [toGraphQLError(error) as GraphQLError] });
    }
  }

  /**
   * The operation's one root field, when the request holds no other operation. Selections of one
   * response name (a field written twice, or again in a fragment) are one field: execution merges
   * them, and validation has made their arguments equal.
   */
  function soleRootField(
    args: ExecutionArgs,
    operation: OperationDefinitionNode,
  ): IdempotentSelection | undefined {
    if (isBatched(args.contextValue)) return undefined;
    const root = idempotentSelections(args.schema, args.document, operation, anyField).filter(
      (selection) => selection.atRoot,
    );
    const names = new Set(root.map(({ node }) => (node.alias ?? node.name).value));
    return names.size === 1 ? root[0] : undefined;
  }

  /**
   * Whether the request's sole root field (`soleRootField`) is an idempotent field given its key:
   * only then does a field's 409 or 503 speak for the whole response (Yoga answers with the highest
   * status of its errors). Beside another field, even a keyed one, a retry could run something
   * again: an unkeyed field, or a keyed field in lease mode whose resolver failed (its key freed) or
   * whose outcome is unknown.
   */
  function keyedField(
    args: ExecutionArgs,
    operation: OperationDefinitionNode,
    { fieldName, node }: IdempotentSelection,
  ): boolean {
    if (!prepare(args.schema).fields.has(fieldName)) return false;
    const variables = getVariableValues(args.schema, operation.variableDefinitions ?? [], {
      ...args.variableValues,
    });
    if (variables.errors) return false;
    const mutationFields = args.schema.getMutationType()?.getFields() ?? {};
    try {
      return getArgumentValues(mutationFields[fieldName]!, node, variables.coerced)[argumentName] != null;
    } catch {
      return false;
    }
  }

  /** Whether the context's request carried a batch of several operations. */
  function isBatched(context: unknown): boolean {
    const { request } = (context ?? {}) as { request?: unknown };
    return typeof request === 'object' && request !== null && batches.has(request);
  }
}

/** An operation that finished with errors: rolled back, and its errors answered (or replayed). */
class FailedOperation extends Error {
  override name = 'FailedOperation';
  /** Observers see the first field's error, as under a field key. */
  readonly [observedError]: unknown;
  constructor(readonly errors: readonly GraphQLError[]) {
    // The first resolver error as thrown, for the store to tell a write conflict it retries.
    super(errors[0]?.message ?? 'The operation failed', { cause: errors[0]?.originalError });
    this[observedError] = errors[0]?.originalError ?? errors[0];
  }
}

/**
 * Stores a failed operation's errors (their original errors through `codec`, with their paths),
 * and any other error the core keeps for the key (in lease mode, a result too large or that cannot
 * be stored) through `codec` as it is.
 */
function failedOperationCodec(codec: ErrorCodec): ErrorCodec {
  type Stored =
    | { errors: { path?: readonly (string | number)[]; error: unknown }[] }
    | { error: unknown; errors?: undefined };
  return {
    encode(error): Stored {
      if (!(error instanceof FailedOperation)) return { error: codec.encode(error) };
      const errors = error.errors.map((e) => ({ path: e.path, error: codec.encode(e.originalError ?? e) }));
      return { errors };
    },
    decode(stored) {
      const { errors } = stored as Stored;
      if (errors === undefined) return codec.decode((stored as { error: unknown }).error);
      return new FailedOperation(
        errors.map(({ path, error }) => locatedError(codec.decode(error), undefined, path)),
      );
    },
  };
}

/**
 * A root value of the execution's own: it reads everything from the given one (root resolvers see
 * the same members), and is a key no other execution shares.
 */
function rootOf(rootValue: unknown): object {
  const reads = typeof rootValue === 'object' || typeof rootValue === 'function' ? rootValue : null;
  return Object.create(reads) as object;
}

/**
 * What graphql-js makes of a resolver's value before it answers, as far as storing it goes: a
 * returned `Error` is the field's error (thrown here, so nothing commits and `replayErrors`
 * judges it), promises in lists and plain objects are awaited (graphql-js awaits them as it
 * completes the value; stored as they are, they would replay as `{}`), and iterators are read into
 * lists. A promise that rejects fails the field. A value with neither in it comes back as it is.
 */
async function settled(value: unknown): Promise<unknown> {
  if (value instanceof Error) throw value;
  return awaitedMembers(value);
}

/** The containers a member is found in, nearest first: what makes a cycle. */
interface Within {
  container: object;
  outer: Within | undefined;
}

/**
 * `value` with its promises awaited. A container met more than once (one author under two posts)
 * is awaited once, and every place that holds it gets the same copy; one within itself (a cycle,
 * which cannot be stored anyway) is left as it is there.
 */
async function awaitedMembers(
  value: unknown,
  copies = new Map<object, Promise<unknown>>(),
  within?: Within,
): Promise<unknown> {
  if (isThenable(value)) return awaitedMembers(await value, copies, within);
  const iterator = isIterator(value);
  if (!iterator && (!isContainer(value) || isWithin(value, within) || !isUnsettled(value))) return value;
  let copy = copies.get(value as object);
  if (copy === undefined) {
    // An iterator is read once, into the list graphql-js would make of it.
    copy = iterator
      ? awaitedMembers(Array.from(value), copies, within)
      : awaitedCopy(value as object, copies, { container: value as object, outer: within });
    copies.set(value as object, copy);
  }
  return copy;
}

async function awaitedCopy(
  value: object,
  copies: Map<object, Promise<unknown>>,
  within: Within,
): Promise<unknown> {
  if (Array.isArray(value)) return Promise.all(value.map((member) => awaitedMembers(member, copies, within)));
  const entries = await Promise.all(
    Object.entries(value).map(
      async ([name, member]) => [name, await awaitedMembers(member, copies, within)] as const,
    ),
  );
  const copy = Object.fromEntries(entries);
  return Object.getPrototypeOf(value) === null ? Object.setPrototypeOf(copy, null) : copy;
}

function isWithin(value: object, within: Within | undefined): boolean {
  for (let at = within; at !== undefined; at = at.outer) if (at.container === value) return true;
  return false;
}

/** Whether a promise or an iterator is in `value`, in its lists and plain objects. */
function isUnsettled(value: unknown, seen = new Set<object>()): boolean {
  if (isThenable(value) || isIterator(value)) return true;
  if (!isContainer(value) || seen.has(value)) return false;
  seen.add(value);
  return (Array.isArray(value) ? value : Object.values(value)).some((member) => isUnsettled(member, seen));
}

/** A list or a plain object: what graphql-js completes member by member. */
function isContainer(value: unknown): value is object {
  if (typeof value !== 'object' || value === null) return false;
  const prototype = Object.getPrototypeOf(value);
  return Array.isArray(value) || prototype === Object.prototype || prototype === null;
}

/**
 * An iterator (a generator, `map.values()`): graphql-js completes a list from it, reading it once.
 * Stored as it is, it would replay as `{}`.
 */
function isIterator(value: unknown): value is IterableIterator<unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const { next, [Symbol.iterator]: iterate } = value as { next?: unknown; [Symbol.iterator]?: unknown };
  return typeof next === 'function' && typeof iterate === 'function';
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}

/**
 * A context of the resolver's own: it reads everything from the shared one and adds the
 * transaction client, so concurrent fields never see each other's transaction.
 */
function withTransaction(context: unknown, txName: string, tx: unknown): object {
  // Without a prototype: a member named __proto__ is a member here too.
  const own: PropertyDescriptorMap = Object.create(null);
  if (typeof context === 'object' && context !== null) {
    // The shared context's own members are this one's own too, so that `{ ...context }` holds
    // them; each reads the shared one as it is now, and a write stays this context's, as it would
    // on an object that inherits them.
    const descriptors = Object.getOwnPropertyDescriptors(context);
    // Symbol-keyed ones too (a tracing span's key), as a spread copies them.
    for (const name of Reflect.ownKeys(descriptors) as (keyof typeof descriptors)[]) {
      const { enumerable } = descriptors[name]!;
      own[name] = {
        enumerable,
        configurable: true,
        get: () => Reflect.get(context, name),
        set(this: object, value: unknown) {
          Object.defineProperty(this, name, { value, enumerable, writable: true, configurable: true });
        },
      };
    }
  }
  own[txName] = { value: tx, enumerable: true, writable: true, configurable: true };
  return Object.create((context ?? null) as object | null, own);
}

/** What an idempotent resolver finds at `context.idempotency`. */
export interface IdempotencyResolverContext<Tx = unknown> {
  /** The key the field (or the operation) runs under. */
  key: string;
  /** The sha256 of the operation and its input, without the key. */
  fingerprint: string;
  /** When the key was claimed. */
  firstSeenAt: Date;
  /**
   * Lease mode: `context.idempotency.step(name, fn)` runs `fn` at most once per key and step name
   * and stores its result before the resolver goes on; a retry after a crash resumes after the
   * steps that completed. Throws in transactional mode.
   */
  step: Step<Tx>;
}

/**
 * `withTransaction`, and `idempotency` (the claim and its `step`) on the same context of the
 * resolver's own: the user's context object is never written to.
 */
function withClaim(context: unknown, txName: string, tx: unknown, claim: ResolverClaim<unknown>): object {
  const { key, fingerprint, firstSeenAt, step = stepsNeedLeaseMode } = claim;
  const idempotency: IdempotencyResolverContext = { key, fingerprint, firstSeenAt, step };
  return Object.defineProperty(withTransaction(context, txName, tx), 'idempotency', {
    value: idempotency,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}

/** The headers of the request in the context: Yoga's `request`, or a Node `req`. */
function requestHeadersOf(context: unknown): HeadersLike | undefined {
  const { request, req } = (context ?? {}) as {
    request?: { headers?: unknown };
    req?: { headers?: unknown };
  };
  const headers = request?.headers ?? req?.headers;
  return headers && typeof headers === 'object' ? (headers as HeadersLike) : undefined;
}

/**
 * A header of the request in the context, case-insensitively; none of a WebSocket's upgrade
 * request (graphql-ws), whose headers speak for every operation on the socket.
 */
function contextHeader(context: unknown, name: string): HeaderValue {
  return headerOf(callHeaders(requestHeadersOf(context)).headers, name);
}

function extensionOf({ replayed, record }: IdempotentResult<unknown>): IdempotencyExtension {
  return {
    key: record.key,
    replayed,
    firstSeenAt: record.firstSeenAt.toISOString(),
    expiresAt: record.expiresAt.toISOString(),
  };
}

function withExtension(result: unknown, idempotency: unknown): ExecutionResult {
  // Once a response, with spreads: another plugin's extensions may come from JSON, where a member
  // named __proto__ is a member (`Object.assign` would set the prototype).
  const { extensions, ...rest } = result as ExecutionResult;
  return { ...rest, extensions: { ...extensions, idempotency } };
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof (value as { [Symbol.asyncIterator]?: unknown } | null)?.[Symbol.asyncIterator] === 'function';
}
