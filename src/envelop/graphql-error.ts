import { GraphQLError } from 'graphql';
import { RETRYABLE_CODES, RETRYABLE_STATUSES } from '../client/retry-policy.js';
import { carriesIdempotencyError, isIdempotencyError, statusOf } from '../core/errors.js';
import { httpAnswerOf } from '../core/http-status.js';
import { defaultErrorCodec, type ErrorCodec } from '../core/run-idempotent.js';

/**
 * One of our errors as a `GraphQLError` with `extensions.code` and `extensions.http` (the status,
 * and `Retry-After` for `IDEMPOTENCY_KEY_IN_PROGRESS`), which Yoga makes the response's; any other
 * error comes back unchanged. The status is left out unless it may speak for the whole request: a
 * status that asks for a retry (409, 503) when `retrySafe` (a retry of the whole request runs
 * nothing again), any other when the error `answersRequest` (nothing else in the request ran).
 */
export function toGraphQLError(
  error: unknown,
  { retrySafe, answersRequest } = { retrySafe: true, answersRequest: true },
): unknown {
  if (!isIdempotencyError(error)) return error;
  const http = httpAnswerOf(error);
  const speaks = RETRYABLE_STATUSES.has(http.status) ? retrySafe : answersRequest;
  // Deliberately without `originalError`: servers that mask unexpected errors (Yoga does) pass a
  // GraphQLError through only when it does not wrap another error.
  return new GraphQLError(error.message, {
    extensions: speaks ? { code: error.code, http } : { code: error.code },
  });
}

/**
 * Whether `error` is one of our errors (`carriesIdempotencyError`), or a `GraphQLError` carrying one
 * of our codes (a downstream service's answer the resolver forwarded), through its `originalError`s:
 * either speaks of another key, and is never kept for this one, whatever `replayErrors` says.
 */
export function carriesOurCode(error: unknown): boolean {
  let node = error;
  for (let depth = 0; depth < 10 && node; depth++) {
    if (carriesIdempotencyError(node)) return true;
    if (!(node instanceof GraphQLError)) return false;
    const { code } = node.extensions;
    if (typeof code === 'string' && Object.hasOwn(statusOf, code)) return true;
    node = node.originalError;
  }
  return false;
}

/**
 * A resolver's own error as the response carries it: a `GraphQLError` with one of our codes that
 * asks for a retry (a downstream call's 409 or 503 it forwarded) loses its `http` status and
 * `Retry-After`, since the resolver may have acted before it and a retry would run it again. Any
 * other error is unchanged; `error` may be one graphql-js located (an operation's errors).
 */
export function withoutRetryStatus<E>(error: E): E {
  if (!(error instanceof GraphQLError)) return error;
  const { http, ...extensions } = error.extensions;
  if (http === undefined || !RETRYABLE_CODES.has(extensions.code)) return error;
  return new GraphQLError(error.message, {
    nodes: error.nodes,
    source: error.source,
    positions: error.positions,
    path: error.path,
    originalError: error.originalError,
    extensions,
  }) as E;
}

/**
 * The plugin's default `errorCodec`: the core's (name, message, code), plus the `extensions` of a
 * `GraphQLError`, which is rebuilt as one, so a replayed error keeps its `extensions.code`. A
 * `GraphQLError` wrapping an error of another kind is rebuilt wrapping one too, so a server that
 * masks such errors (Yoga does) masks the replay as it masked the first answer.
 */
export const graphqlErrorCodec: ErrorCodec = {
  encode(error) {
    if (!(error instanceof GraphQLError)) return defaultErrorCodec.encode(error);
    const wrapped = wrappedErrorOf(error);
    return {
      graphqlError: defaultErrorCodec.encode(error),
      extensions: error.extensions,
      ...(wrapped && { wraps: defaultErrorCodec.encode(wrapped) }),
    };
  },
  decode(stored) {
    const { graphqlError, extensions, wraps } = stored as {
      graphqlError?: unknown;
      extensions?: Record<string, unknown>;
      wraps?: unknown;
    };
    if (graphqlError === undefined) return defaultErrorCodec.decode(stored);
    const originalError = wraps === undefined ? undefined : defaultErrorCodec.decode(wraps);
    return new GraphQLError(defaultErrorCodec.decode(graphqlError).message, { extensions, originalError });
  },
};

/** The error of another kind at the end of a `GraphQLError`'s chain of `originalError`s, if any. */
function wrappedErrorOf(error: GraphQLError): Error | undefined {
  let inner: Error | undefined = error.originalError;
  while (inner instanceof GraphQLError) inner = inner.originalError;
  return inner;
}
