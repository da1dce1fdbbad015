import type { FetchFunction } from './idempotent-fetch.js';
import { LOST_ANSWER_STATUSES } from './retry-policy.js';

/**
 * A `fetch` for tRPC's `httpLink` under which `idempotencyLink` retries, with the same key, the page a
 * proxy or load balancer answers in the server's place when it lost the server's answer: a `408`,
 * `502`, `503` or `504` whose body is not JSON (nginx's page when its connection to the server broke).
 * `httpLink` reports such a body only as the parser's error, without its status, and the link cannot
 * tell it from a page standing for any other answer, an `IDEMPOTENCY_OUTCOME_UNKNOWN` among them:
 * returned at once without this. With it, such an answer fails as a connection lost before the
 * answer does. Any other failed answer (a `500` `IDEMPOTENCY_OUTCOME_UNKNOWN`, a batch's `207`) is
 * read whole here, so that one cut off after its status fails with that status
 * (`CutOffAnswerError`), which says whether to send it again, rather than as a lost connection,
 * which is sent again. Any other answer is returned as it came.
 */
export function retryingProxyErrors(fetch: FetchFunction = globalThis.fetch): PassingFetch {
  return async (input, init) => {
    const response = await fetch(input, init as RequestInit | undefined);
    const { status, statusText, headers } = response;
    if (status < 400 && status !== 207) return response;
    if (LOST_ANSWER_STATUSES.has(status) && !/\bjson\b/i.test(headers.get('content-type') ?? '')) {
      await response.body?.cancel().catch(() => undefined);
      throw new TypeError(
        `fetch failed: ${status} ${statusText} from something in front of the server, which lost its answer`,
      );
    }
    let body: string;
    try {
      body = await response.text();
    } catch (cause) {
      throw new CutOffAnswerError(status, cause);
    }
    return new Response(body, { status, statusText, headers });
  };
}

/**
 * An answer whose status came and whose body was then cut off: `idempotencyLink` goes by the status
 * alone (a `500` is not sent again, a `409` is), where a lost connection would be sent again.
 */
export class CutOffAnswerError extends Error {
  override name = 'CutOffAnswerError';

  constructor(
    readonly status: number,
    cause: unknown,
  ) {
    super(`The server's ${status} answer was cut off after its status`, { cause });
  }
}

/**
 * A `fetch` that passes its `init` on as it comes, so that it fits tRPC's `FetchEsque` under
 * `exactOptionalPropertyTypes` too (where `globalThis.fetch` itself does not).
 */
export type PassingFetch = (input: string | URL | Request, init?: object) => Promise<Response>;
