import { UpstreamFailure } from '#core/fallback.ts';
import { transportFailure } from './http.ts';

/**
 * Server-sent events reader: yields the `data` payload of each event from a byte stream, as soon as
 * the blank line that ends it has arrived. Comments (`: keep-alive`) and data-less events are skipped.
 * Events are split on the raw text rather than line by line: the common single-line `data: …` event
 * costs one `indexOf` and one `slice`.
 *
 * Each chunk is searched from where the text before it ended, and an event may not grow past
 * `maxEventLength` characters (a protocol fault): an upstream that never ends an event would otherwise have
 * every chunk rescan and re-copy all it had sent, holding its instance for a minute per 100 MB.
 */
export async function* sseData(
  body: AsyncIterable<Uint8Array>,
  maxEventLength = MAX_EVENT_LENGTH,
): AsyncGenerator<string, void, undefined> {
  const decoder = new TextDecoder();
  let pending = '';
  // A chunk ending in `\r` may be the first half of a `\r\n`: it waits for the next chunk.
  let carry = '';
  for await (const chunk of body) {
    let text = carry + decoder.decode(chunk, { stream: true });
    carry = '';
    if (text.includes('\r')) {
      if (text.endsWith('\r')) {
        carry = '\r';
        text = text.slice(0, -1);
      }
      text = text.replace(/\r\n?/g, '\n');
    }
    // The text before this chunk held no blank line: one can only end in the new text (or just before it).
    const from = Math.max(0, pending.length - 1);
    pending += text;
    let start = 0;
    let end = pending.indexOf('\n\n', from);
    while (end !== -1) {
      const data = eventData(pending.slice(start, end));
      if (data !== null) yield data;
      start = end + 2;
      end = pending.indexOf('\n\n', start);
    }
    pending = pending.slice(start);
    if (pending.length > maxEventLength) {
      throw new UpstreamFailure('protocol', `upstream event longer than ${maxEventLength} characters`);
    }
  }
  pending += (carry + decoder.decode()).replace(/\r\n?/g, '\n');
  const last = pending.trim() === '' ? null : eventData(pending);
  if (last !== null) yield last;
}

/** Longest event accepted: far beyond any real chunk (a large tool-call delta is kilobytes). */
const MAX_EVENT_LENGTH = 8 * 1024 * 1024;

const eventData = (event: string): string | null => {
  if (event.startsWith('data: ') && !event.includes('\n', 6)) return event.slice(6);
  let data: string | null = null;
  for (const line of event.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const value = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
    data = data === null ? value : `${data}\n${value}`;
  }
  return data;
};

/**
 * The upstream side of a relayed event stream, once its first event has committed the deployment: reads the
 * next event (a cut-off is a `dropped` failure), and ends in one of two ways — `finish()` after the protocol's
 * last event reads the response to its end off the client's path, so undici can reuse the connection;
 * `close()` (client gone, or a failure) destroys it. `onEnd` runs once either way.
 */
export class UpstreamEvents {
  readonly #events: AsyncGenerator<string, void, undefined>;
  readonly #abort: AbortController;
  readonly #onEnd: () => void;
  #ended = false;

  constructor(events: AsyncGenerator<string, void, undefined>, abort: AbortController, onEnd: () => void) {
    this.#events = events;
    this.#abort = abort;
    this.#onEnd = onEnd;
  }

  /**
   * The next event's data; throws `UpstreamFailure` when the response breaks, or ends (cleanly) before the
   * protocol's last event — unless `whole` says the reply is complete already, when a clean end is null.
   */
  next(cutOff: string): Promise<string>;
  next(cutOff: string, whole: boolean): Promise<string | null>;
  async next(cutOff: string, whole = false): Promise<string | null> {
    let next: IteratorResult<string, void>;
    try {
      next = await this.#events.next();
    } catch (error) {
      throw transportFailure(error);
    }
    if (next.done) {
      if (whole) return null;
      throw new UpstreamFailure('dropped', cutOff);
    }
    return next.value;
  }

  /** The protocol's last event has arrived: drain whatever follows in the background. */
  finish(): void {
    if (this.#ended) return;
    this.#ended = true;
    const events = this.#events;
    const onEnd = this.#onEnd;
    (async () => {
      try {
        while (!(await events.next()).done) {
          // Nothing after the last event matters.
        }
      } catch {
        // The response is already complete for the client; a late socket error changes nothing.
      } finally {
        onEnd();
      }
    })();
  }

  /** Abandons the response: the connection is destroyed. Safe after `finish()`. */
  close(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#onEnd();
    this.#abort.abort();
    this.#events.return(undefined).catch(() => {});
  }
}
