/** One mutation the storm sends to a server process. */
export interface StormRequest {
  id: number;
  scope: string;
  key: string;
}

/** What the server process answers: the result, or the error a client would see. */
export type StormAnswer =
  | { id: number; ok: true; paymentId: number; replayed: boolean }
  | { id: number; ok: false; code?: string; retryAfterMs?: number; message: string };

/** The last message of a server process, when told to stop: the database errors it saw, by place and code. */
export interface StormServerSummary {
  conflicts: Record<string, number>;
}

/**
 * A server process's answer to `'calls'`: the requests it has not answered yet, each with the
 * phase its call is in (`IdempotencyPhase`, or `started` before the first) and for how long.
 */
export interface StormServerCalls {
  calls: { id: number; key: string; phase: string; forMs: number }[];
}
