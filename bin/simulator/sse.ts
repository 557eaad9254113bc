/**
 * Server-sent events in OpenAI's streaming format: `data: <json>\n\n` events ending with
 * `data: [DONE]\n\n`; {@link sendFramedEvents} paces other framings (Anthropic's named events).
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
  /**
   * With `dropAfterChunks`: instead of dropping, send this (an error event, framed) and end the response cleanly,
   * as an upstream reporting a failure mid-stream does.
   */
  errorEvent?: string | null;
}

/**
 * Streams `payloads` (serialised JSON objects) as SSE data events followed by `[DONE]`, honouring the
 * pacing. Resolves once everything is written, or as soon as the client goes away.
 */
export function sendEventStream(
  ex: Exchange,
  payloads: readonly string[],
  pacing: StreamPacing,
): Promise<void> {
  return sendFramedEvents(ex, payloads, pacing, sseEvent, SSE_DONE);
}

/**
 * Streams events, each turned into its wire text by `frame`, then `done` (`''` for a protocol whose last
 * event is an ordinary one, like Anthropic's `message_stop`). `dropAfterChunks` counts events.
 */
export async function sendFramedEvents(
  ex: Exchange,
  events: readonly string[],
  pacing: StreamPacing,
  frame: (event: string) => string,
  done: string,
): Promise<void> {
  const { res } = ex;
  res.writeHead(200, SSE_HEADERS);
  const dropping = pacing.dropAfterChunks !== null;
  const count = dropping ? Math.min(pacing.dropAfterChunks ?? 0, events.length) : events.length;

  if (pacing.chunkDelayMs <= 0) {
    // Hot path for benchmarks: one write, no timers, so the simulator is never the bottleneck.
    let body = '';
    for (let i = 0; i < count; i++) body += frame(events[i] as string);
    if (dropping && pacing.errorEvent) {
      res.end(body + pacing.errorEvent);
    } else if (dropping) {
      if (body !== '') res.write(body);
      else res.flushHeaders();
      ex.drop();
    } else {
      res.end(body + done);
    }
    return;
  }

  if (count === 0) res.flushHeaders();
  for (let i = 0; i < count; i++) {
    if (i > 0 && !(await ex.sleep(pacing.chunkDelayMs))) return;
    res.write(frame(events[i] as string));
  }
  if (dropping && pacing.errorEvent) {
    if (count > 0 && !(await ex.sleep(pacing.chunkDelayMs))) return;
    res.end(pacing.errorEvent);
    return;
  }
  if (dropping) {
    ex.drop();
    return;
  }
  if (done !== '' && count > 0 && !(await ex.sleep(pacing.chunkDelayMs))) return;
  res.end(done);
}
