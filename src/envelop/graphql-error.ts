import { GraphQLError } from 'graphql';
import { isIdempotencyError } from '../core/errors.js';
import { httpAnswerOf } from '../core/http-status.js';
import { defaultErrorCodec, type ErrorCodec } from '../core/run-idempotent.js';

/**
 * One of our errors as a `GraphQLError` with `extensions.code` and `extensions.http` (the status,
 * and `Retry-After` for `IDEMPOTENCY_KEY_IN_PROGRESS`); any other error comes back unchanged.
 */
export function toGraphQLError(error: unknown): unknown {
  if (!isIdempotencyError(error)) return error;
  const http = httpAnswerOf(error);
  // Deliberately without `originalError`: servers that mask unexpected errors (Yoga does) pass a
  // GraphQLError through only when it does not wrap another error.
  return new GraphQLError(error.message, { extensions: { code: error.code, http } });
}

/**
 * The plugin's default `errorCodec`: the core's (name, message, code), plus the `extensions` of a
 * `GraphQLError`, which is rebuilt as one, so a replayed error keeps its `extensions.code`.
 */
export const graphqlErrorCodec: ErrorCodec = {
  encode(error) {
    const stored = defaultErrorCodec.encode(error);
    return error instanceof GraphQLError ? { graphqlError: stored, extensions: error.extensions } : stored;
  },
  decode(stored) {
    const { graphqlError, extensions } = stored as {
      graphqlError?: unknown;
      extensions?: Record<string, unknown>;
    };
    if (graphqlError === undefined) return defaultErrorCodec.decode(stored);
    return new GraphQLError(defaultErrorCodec.decode(graphqlError).message, { extensions });
  },
};
