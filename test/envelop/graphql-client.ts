import { createServer } from 'node:http';
import type { IdempotencyExtension } from '../../src/envelop/index.js';
import { listen as listenOn } from '../helpers/listen.js';

/** A GraphQL response as the client sees it. */
export interface GraphQLResponse {
  status: number;
  headers: Headers;
  body: {
    data?: Record<string, unknown> | null;
    errors?: { message: string; path?: (string | number)[]; extensions?: Record<string, unknown> }[];
    extensions?: Record<string, unknown>;
  };
}

/** One GraphQL request: the operation, and who sends it with which idempotency header. */
export interface GraphQLRequest {
  query: string;
  variables?: Record<string, unknown>;
  operationName?: string;
  userId: string;
  /** Sent as `Idempotency-Key`, exactly as given. */
  idempotencyKey?: string;
}

/** Anything that answers a Fetch request: `yoga.fetch`, or `fetch` against a real server. */
export type FetchLike = (url: string, init: RequestInit) => Promise<Response>;

/** `extensions.idempotency` of a header key, or of the field-level key of root field `field`. */
export function idempotencyOf(response: GraphQLResponse, field?: string): IdempotencyExtension | undefined {
  const idempotency = response.body.extensions?.idempotency as Record<string, unknown> | undefined;
  return (field === undefined ? idempotency : idempotency?.[field]) as IdempotencyExtension | undefined;
}

/** Posts `request` as JSON and parses the answer. */
export async function postGraphQL(fetchFn: FetchLike, url: string, request: GraphQLRequest) {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/graphql-response+json',
    'x-user-id': request.userId,
  };
  if (request.idempotencyKey !== undefined) headers['idempotency-key'] = request.idempotencyKey;
  const response = await fetchFn(url, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      query: request.query,
      variables: request.variables,
      operationName: request.operationName,
    }),
  });
  const body = (await response.json()) as GraphQLResponse['body'];
  return { status: response.status, headers: response.headers, body } satisfies GraphQLResponse;
}

/** Serves a request listener (a Yoga instance) on a free local port. */
export async function listen(
  handler: Parameters<typeof createServer>[1],
): Promise<{ url: string; close: () => Promise<void> }> {
  const { url, close } = await listenOn(createServer(handler));
  return { url: `${url}/graphql`, close };
}
