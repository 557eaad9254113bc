/**
 * Server-sent events in OpenAI's streaming format: `data: <json>\n\n` events ending with
 * `data: [DONE]\n\n`.
 */
import type { Exchange } from '#sim/http.ts';

/** Response headers of an OpenAI event stream. */
export const SSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
});

/** The terminating event of an OpenAI stream. */
export const SSE_DONE = 'data: [DONE]\n\n';

/** Formats one SSE data event carrying an already serialised JSON payload. */
export function sseEvent(json: string): string {
  return `data: ${json}\n\n`;
}

/** How to pace and (optionally) sabotage an event stream. */
export interface StreamPacing {
  /** Delay between consecutive events (including before `[DONE]`); 0 writes everything at once. */
  chunkDelayMs: number;
  /** When set, send only this many data events and then drop the connection without `[DONE]`. */
  dropAfterChunks: number | null;
}

/**
 * Streams `payloads` (serialised JSON objects) as SSE data events followed by `[DONE]`, honouring the
 * pacing. Resolves once everything is written, or as soon as the client goes away.
 */
export async function sendEventStream(
  ex: Exchange,
  payloads: readonly string[],
  pacing: StreamPacing,
): Promise<void> {
  const { res } = ex;
  res.writeHead(200, SSE_HEADERS);
  const dropping = pacing.dropAfterChunks !== null;
  const count = dropping ? Math.min(pacing.dropAfterChunks ?? 0, payloads.length) : payloads.length;

  if (pacing.chunkDelayMs <= 0) {
    // Hot path for benchmarks: one write, no timers, so the simulator is never the bottleneck.
    let body = '';
    for (let i = 0; i < count; i++) body += sseEvent(payloads[i] as string);
    if (dropping) {
      if (body !== '') res.write(body);
      else res.flushHeaders();
      ex.drop();
    } else {
      res.end(body + SSE_DONE);
    }
    return;
  }

  if (count === 0) res.flushHeaders();
  for (let i = 0; i < count; i++) {
    if (i > 0 && !(await ex.sleep(pacing.chunkDelayMs))) return;
    res.write(sseEvent(payloads[i] as string));
  }
  if (dropping) {
    ex.drop();
    return;
  }
  if (count > 0 && !(await ex.sleep(pacing.chunkDelayMs))) return;
  res.end(SSE_DONE);
}
