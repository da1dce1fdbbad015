/**
 * The part of `@opentelemetry/api`'s `trace` the clients use: pass `trace` itself. Taking it as an
 * option keeps `@opentelemetry/api` an optional peer dependency (and the clients browser-safe):
 * nothing is imported, and without it nothing is recorded.
 */
export interface ActiveSpanSource {
  getActiveSpan(): { setAttribute(name: string, value: number): unknown } | undefined;
}

/**
 * Marks the span active while a retry is sent (an HTTP client span the caller opened around the
 * call, or the request's) with the semantic convention's `http.request.resend_count`: how many
 * times this request was sent before.
 */
export function markResend(trace: ActiveSpanSource | undefined, resends: number): void {
  if (!trace || resends < 1) return;
  try {
    trace.getActiveSpan()?.setAttribute('http.request.resend_count', resends);
  } catch {
    // Telemetry never changes what the request does.
  }
}
