import type { Plugin } from '@envelop/core';
import {
  defaultFieldResolver,
  type ExecutionArgs,
  type ExecutionResult,
  type GraphQLError,
  type GraphQLFieldResolver,
  type GraphQLSchema,
  getOperationAST,
  getVariableValues,
  locatedError,
  type OperationDefinitionNode,
  print,
} from 'graphql';
import {
  IdempotencyInputError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMissingError,
  isIdempotencyError,
} from '../core/errors.js';
import { type HeaderValue, parseKeyHeader, resolveKey } from '../core/key.js';
import {
  type ErrorCodec,
  type IdempotentResult,
  type RunIdempotentOptions,
  runIdempotent,
  runUnrecorded,
} from '../core/run-idempotent.js';
import { type IdempotentField, idempotentFieldsOf } from './directive.js';
import { graphqlErrorCodec, toGraphQLError } from './graphql-error.js';

/** What `scope` may return: a principal, or `null` for the global scope (with `allowGlobalScope`). */
export type ScopeValue = string | number | null | undefined;

/** Options of `useIdempotency`; the core's options (`store`, `ttlMs`, `onEvent`, …) pass through. */
// biome-ignore lint/suspicious/noExplicitAny: an unannotated `scope` may read any context member.
export interface UseIdempotencyOptions<Context = any, Tx = unknown>
  extends Omit<RunIdempotentOptions<Tx>, 'scope' | 'key' | 'operation' | 'input' | 'keySource'> {
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
  header?: string | false;
  /**
   * The argument that makes a root mutation field idempotent on its own and carries its key.
   * @default 'idempotencyKey'
   */
  argumentName?: string;
  /**
   * The context member the resolver finds the transaction client in (in lease mode, the store's
   * plain client).
   * @default 'tx'
   */
  txName?: string;
  /**
   * Whether a field that has the key argument but no `@idempotent(required:)` rejects a call
   * without a key (`IDEMPOTENCY_KEY_MISSING`); when `false` such a call runs unrecorded, with
   * `context.tx` as a keyed call would get it (a store transaction, or in lease mode the store's
   * plain client).
   * @default true
   */
  required?: boolean;
  /**
   * `transactional` or `lease`, as in `runIdempotent`, for every idempotent field without an
   * `@idempotent(mode:)` of its own (those fields also fall back to the store's default mode).
   * Operations under an `Idempotency-Key` header run in lease mode only when this says `'lease'`:
   * in a transaction an operation is all or nothing, while under a lease the writes of fields
   * that succeeded stay when another field fails, and the released key runs them all again.
   * @default the store's `defaults.mode` for fields, 'transactional' for header keys
   */
  mode?: RunIdempotentOptions['mode'];
  /**
   * How replayable errors (see `replayErrors`) are stored and rebuilt.
   * @default the core's codec, keeping a `GraphQLError`'s `extensions`
   */
  errorCodec?: ErrorCodec;
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

/** What one mutation's execution shares with its idempotent fields, on the context under this symbol. */
interface Execution {
  /** The header's key, when it claims the whole operation. */
  operationKey?: string;
  fields: Map<string | number, IdempotencyExtension>;
}

const execution = Symbol('idempotent-mutations.execution');
/** Requests that Yoga parsed into a batch of several operations (`batching: true`). */
const batches = new WeakSet<object>();

/**
 * Yoga's request-parsing hook, typed by its shape (this folder does not import Yoga). Envelop
 * servers without request batching never call it.
 */
interface RequestParseHook {
  onRequestParse(payload: { request: object }): {
    onRequestParseDone(payload: { requestParserResult: unknown }): void;
  };
}
/** Resolvers installed by this plugin, so a schema built from a wrapped one is not wrapped twice. */
const installed = new WeakSet<GraphQLFieldResolver<unknown, unknown>>();

/**
 * Makes GraphQL mutations idempotent, for Yoga or any Envelop-based server.
 *
 * - **Field-level:** a root mutation field with the `idempotencyKey` argument or `@idempotent`
 *   runs at most once per key; each such field of an operation claims its own key. Its resolver
 *   runs inside the claim's transaction and finds the transaction client at `context.tx`; under
 *   `@idempotent(mode: LEASE)` (or `mode: 'lease'`) it runs outside any transaction and
 *   `context.tx` is the store's plain client.
 * - **Operation-level:** an `Idempotency-Key` header on a mutation operation claims the whole
 *   operation: it executes inside one transaction and its result is replayed verbatim.
 *
 * Queries and subscriptions are never touched. The plugin wraps the resolvers of the schema's
 * root mutation fields in place, as `@envelop/on-resolve` does; use one `useIdempotency` per schema.
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
  const prepared = new WeakSet<GraphQLSchema>();

  /** Checks the schema's idempotent fields (throwing on misdeclared ones) and wraps their resolvers. */
  function prepare(schema: GraphQLSchema | undefined): void {
    if (!schema || prepared.has(schema)) return;
    for (const [field, options] of idempotentFieldsOf(schema, argumentName)) {
      const resolve = field.resolve ?? defaultFieldResolver;
      if (!installed.has(resolve)) field.resolve = idempotentResolver(resolve, options);
    }
    prepared.add(schema);
  }

  function idempotentResolver(
    resolve: GraphQLFieldResolver<unknown, unknown>,
    field: IdempotentField,
  ): GraphQLFieldResolver<unknown, unknown> {
    const keyRequired = field.required ?? required;
    const mode = field.mode ?? core.mode;

    const wrapped: GraphQLFieldResolver<unknown, unknown> = async (source, args, context, info) => {
      // The mutation type can be reachable below the root too; only root fields are idempotent.
      if (info.operation.operation !== 'mutation' || info.path.prev !== undefined) {
        return resolve(source, args, context, info);
      }
      const coordinate = `${info.parentType.name}.${info.fieldName}`;
      const state = executionOf(context);
      try {
        if (state?.operationKey !== undefined) {
          // The header's key claims the whole operation; this field runs in its transaction.
          resolveKey(state.operationKey, args[argumentName], core.keyPolicy);
          return await resolve(source, args, context, info);
        }
        const key = resolveKey(undefined, args[argumentName], core.keyPolicy);
        if (key === undefined) {
          if (keyRequired) {
            throw new IdempotencyKeyMissingError(
              `${coordinate} requires an idempotency key: send the "${argumentName}" argument` +
                (header ? ` or the ${header} header` : ''),
            );
          }
          return await runUnrecorded(core.store, mode, (tx) =>
            resolve(source, args, withTransaction(context, txName, tx), info),
          );
        }
        const { [argumentName]: _key, ...input } = args;
        const outcome = await runIdempotent(
          {
            ...core,
            errorCodec,
            ttlMs: field.ttlMs ?? core.ttlMs,
            mode,
            leaseMs: field.leaseMs ?? core.leaseMs,
            scope: await scope(context as Context),
            key,
            operation: coordinate,
            input,
            keySource: 'argument',
          },
          (tx) => resolve(source, args, withTransaction(context, txName, tx), info),
        );
        state?.fields.set(info.path.key, extensionOf(outcome));
        return outcome.value;
      } catch (error) {
        throw toGraphQLError(error);
      }
    };
    installed.add(wrapped);
    return wrapped;
  }

  /** Runs a whole mutation operation under the header's key, inside one transaction. */
  async function runOperation(
    execute: (args: ExecutionArgs) => unknown,
    args: ExecutionArgs,
    operation: OperationDefinitionNode,
    key: string,
  ): Promise<unknown> {
    const variables = getVariableValues(args.schema, operation.variableDefinitions ?? [], {
      ...args.variableValues,
    });
    // Invalid variables fail the execution before any resolver runs: nothing to claim.
    if (variables.errors) return execute(args);
    const operationName = operation.name?.value ?? null;
    const failed = failedOperationCodec(errorCodec);
    try {
      const outcome = await runIdempotent(
        {
          ...core,
          mode: core.mode ?? 'transactional',
          scope: await scope(args.contextValue as Context),
          key,
          operation: `mutation ${operationName ?? '(anonymous)'}`.slice(0, 255),
          keySource: 'header',
          input: { document: print(args.document), operationName, variables: variables.coerced },
          // Stored only when the user's `replayErrors` accepts every error of the operation.
          replayErrors: (error) =>
            error instanceof FailedOperation &&
            error.errors.every((e) => core.replayErrors?.(e.originalError ?? e) ?? false),
          errorCodec: failed,
        },
        async (tx) => {
          const result = await execute({
            ...args,
            contextValue: withTransaction(args.contextValue, txName, tx),
          });
          if (isAsyncIterable(result)) {
            await result[Symbol.asyncIterator]().return?.();
            throw new IdempotencyInputError('An idempotent operation cannot use @defer or @stream');
          }
          const { data, errors, extensions } = result as ExecutionResult;
          // Any error rolls the whole operation back, so the data that came with it never happened
          // (under a lease, see `mode`, the key is released instead).
          if (errors?.length) throw new FailedOperation(errors);
          // The JSON form is what the client saw; a replay sends exactly it again.
          return JSON.parse(JSON.stringify({ data, extensions })) as ExecutionResult;
        },
      );
      return withExtension(outcome.value, extensionOf(outcome));
    } catch (error) {
      if (error instanceof FailedOperation) return { data: null, errors: error.errors };
      if (isIdempotencyError(error)) return { errors: [toGraphQLError(error)] };
      throw error;
    }
  }

  return {
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
    onExecute({ args, executeFn, setExecuteFn, setResultAndStopExecution, extendContext }) {
      const operation = getOperationAST(args.document, args.operationName);
      if (operation?.operation !== 'mutation') return;
      // A schema that reached execution without `onSchemaChange` (set by a later plugin, say).
      prepare(args.schema);
      const state: Execution = { fields: new Map() };
      extendContext({ [execution]: state });
      let key: string | undefined;
      try {
        key = header ? parseKeyHeader(headerOf(args.contextValue, header), core.keyPolicy) : undefined;
        if (key !== undefined && isBatched(args.contextValue)) {
          throw new IdempotencyKeyInvalidError(
            `An ${header} header on a batch of several operations is ambiguous: send each mutation its own "${argumentName}" argument, or do not batch mutations`,
          );
        }
      } catch (error) {
        setResultAndStopExecution({ errors: [toGraphQLError(error) as GraphQLError] });
        return;
      }
      if (key === undefined) {
        return {
          onExecuteDone({ result, setResult }) {
            if (state.fields.size === 0 || isAsyncIterable(result)) return;
            setResult(withExtension(result, Object.fromEntries(state.fields)));
          },
        };
      }
      state.operationKey = key;
      const operationKey = key;
      setExecuteFn((executeArgs: ExecutionArgs) =>
        runOperation(executeFn, executeArgs, operation, operationKey),
      );
    },
  };
}

/** An operation that finished with errors: rolled back, and its errors answered (or replayed). */
class FailedOperation extends Error {
  override name = 'FailedOperation';
  constructor(readonly errors: readonly GraphQLError[]) {
    super(errors[0]?.message ?? 'The operation failed');
  }
}

/** Stores a failed operation's errors (their original errors through `codec`, with their paths). */
function failedOperationCodec(codec: ErrorCodec): ErrorCodec {
  type Stored = { errors: { path?: readonly (string | number)[]; error: unknown }[] };
  return {
    encode(error) {
      const { errors } = error as FailedOperation;
      return { errors: errors.map((e) => ({ path: e.path, error: codec.encode(e.originalError ?? e) })) };
    },
    decode(stored) {
      const { errors } = stored as Stored;
      return new FailedOperation(
        errors.map(({ path, error }) => locatedError(codec.decode(error), undefined, path)),
      );
    },
  };
}

function executionOf(context: unknown): Execution | undefined {
  return (context as { [execution]?: Execution } | null | undefined)?.[execution];
}

/**
 * A context of the resolver's own: it reads everything from the shared one and adds the
 * transaction client, so concurrent fields never see each other's transaction.
 */
function withTransaction(context: unknown, txName: string, tx: unknown): object {
  return Object.create((context ?? null) as object | null, {
    [txName]: { value: tx, enumerable: true, writable: true, configurable: true },
  });
}

/** Whether the context's request carried a batch of several operations. */
function isBatched(context: unknown): boolean {
  const { request } = (context ?? {}) as { request?: unknown };
  return typeof request === 'object' && request !== null && batches.has(request);
}

function headerOf(context: unknown, name: string): HeaderValue {
  const { request, req } = (context ?? {}) as {
    request?: { headers?: unknown };
    req?: { headers?: unknown };
  };
  const headers = request?.headers ?? req?.headers;
  if (!headers || typeof headers !== 'object') return undefined;
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name);
  return (headers as Record<string, HeaderValue>)[name.toLowerCase()];
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
  const { extensions, ...rest } = result as ExecutionResult;
  return { ...rest, extensions: { ...extensions, idempotency } };
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof (value as { [Symbol.asyncIterator]?: unknown } | null)?.[Symbol.asyncIterator] === 'function';
}
