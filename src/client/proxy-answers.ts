import type { FetchFunction } from './idempotent-fetch.js';
import { LOST_ANSWER_STATUSES } from './retry-policy.js';

/**
 * A `fetch` for tRPC's `httpLink` under which `idempotencyLink` retries, with the same key, the page a
 * proxy or load balancer answers in the server's place when it lost the server's answer: a `408`,
 * `502`, `503` or `504` whose body is not JSON (nginx's page when its connection to the server broke).
 * `httpLink` reports such a body only as the parser's error, without its status, and the link cannot
 * tell it from a page standing for any other answer, an `IDEMPOTENCY_OUTCOME_UNKNOWN` among them:
 * returned at once without this. With it, such an answer fails as a connection lost before the
 * answer does. Any other answer is returned as it came.
 */
export function retryingProxyErrors(fetch: FetchFunction = globalThis.fetch): PassingFetch {
  return async (input, init) => {
    const response = await fetch(input, init as RequestInit | undefined);
    const type = response.headers.get('content-type') ?? '';
    if (!LOST_ANSWER_STATUSES.has(response.status) || /\bjson\b/i.test(type)) return response;
    await response.body?.cancel().catch(() => undefined);
    throw new TypeError(
      `fetch failed: ${response.status} ${response.statusText} from something in front of the server, which lost its answer`,
    );
  };
}

/**
 * A `fetch` that passes its `init` on as it comes, so that it fits tRPC's `FetchEsque` under
 * `exactOptionalPropertyTypes` too (where `globalThis.fetch` itself does not).
 */
export type PassingFetch = (input: string | URL | Request, init?: object) => Promise<Response>;
