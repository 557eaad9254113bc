import { UpstreamFailure } from '#core/fallback.ts';
import { transportFailure } from './http.ts';

/**
 * Server-sent events reader: yields the `data` payload of each event from a byte stream, as soon as
 * the blank line that ends it has arrived. Comments (`: keep-alive`) and data-less events are skipped.
 * Events are split on the raw text rather than line by line: the common single-line `data: …` event
 * costs one `indexOf` and one `slice`.
 *
 * Only each new chunk is searched (and the join with the text before it), an unfinished event is kept in
 * pieces until it ends, and it may not grow past `maxEventLength` characters (a protocol fault): an upstream that
 * never ends an event would otherwise have every chunk rescan and re-copy all it had sent — a minute of its
 * instance per 100 MB.
 */
export async function* sseData(
  body: AsyncIterable<Uint8Array>,
  limit: EventLimit = DEFAULT_EVENT_LIMIT,
): AsyncGenerator<string, void, undefined> {
  const decoder = new TextDecoder();
  // The unfinished event: its pieces, joined only once the event ends (appending to one string would have V8
  // copy it whole at every chunk), and their length.
  let pieces: string[] = [];
  let pendingLength = 0;
  // Whether the last piece ended a line with a bare `\r` whose `\n` may open the next chunk (one line end).
  let skipLf = false;
  for await (const chunk of body) {
    let text = decoder.decode(chunk, { stream: true });
    if (text.length === 0) continue;
    if (skipLf) {
      // Only the very next character can be the CR's LF, whatever chunk it comes in.
      skipLf = false;
      if (text.charCodeAt(0) === 10) text = text.slice(1);
      if (text.length === 0) continue;
    }
    if (text.includes('\r')) {
      skipLf = text.endsWith('\r');
      text = text.replace(/\r\n?/g, '\n');
    }
    // A blank line can only end in the new text, or across the join with the piece before it.
    const joinsBlank = pendingLength > 0 && text.charCodeAt(0) === 10 && endsWithLf(pieces);
    if (!joinsBlank && text.indexOf('\n\n') === -1) {
      pieces.push(text);
      pendingLength += text.length;
      // Tiny chunks would cost more in string headers than in text: fold them now and then.
      if (pieces.length > MAX_PIECES) pieces = [pieces.join('')];
      if (pendingLength > limit.maxEventLength) throw tooLong(limit.maxEventLength);
      continue;
    }
    const pending = pieces.length === 0 ? text : pieces.join('') + text;
    let start = 0;
    let end = pending.indexOf('\n\n', Math.max(0, pendingLength - 1));
    while (end !== -1) {
      const data = eventData(pending.slice(start, end));
      if (data !== null) yield data;
      start = end + 2;
      end = pending.indexOf('\n\n', start);
    }
    const rest = pending.slice(start);
    pieces = rest === '' ? [] : [rest];
    pendingLength = rest.length;
    if (pendingLength > limit.maxEventLength) throw tooLong(limit.maxEventLength);
  }
  const pending = pieces.join('') + decoder.decode().replace(/\r\n?/g, '\n');
  const last = pending.trim() === '' ? null : eventData(pending);
  if (last !== null) yield last;
}

const endsWithLf = (pieces: readonly string[]): boolean => {
  const last = pieces.at(-1);
  return last !== undefined && last.charCodeAt(last.length - 1) === 10;
};

const tooLong = (limit: number): UpstreamFailure =>
  new UpstreamFailure('protocol', `upstream event longer than ${limit} characters`);

const MAX_PIECES = 1024;

/** Longest event accepted: far beyond any real chunk (a large tool-call delta is kilobytes). */
export const MAX_EVENT_LENGTH = 8 * 1024 * 1024;

/**
 * The longest event `sseData` takes, read as each piece comes: a reader may lower it once the body has shown itself
 * an event stream (a body that may be a whole reply reads as one event until then).
 */
export interface EventLimit {
  maxEventLength: number;
}

const DEFAULT_EVENT_LIMIT: Readonly<EventLimit> = Object.freeze({ maxEventLength: MAX_EVENT_LENGTH });

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
   * The next event's data; throws `UpstreamFailure` when the response breaks, or ends before the protocol's last
   * event — unless `whole` says the reply is complete already, when its end, clean or not, is null.
   */
  next(cutOff: string): Promise<string>;
  next(cutOff: string, whole: boolean): Promise<string | null>;
  async next(cutOff: string, whole = false): Promise<string | null> {
    let next: IteratorResult<string, void>;
    try {
      next = await this.#events.next();
    } catch (error) {
      // A reply already whole is the client's in full: an upstream that then drops the connection, instead of
      // closing it after its last event, takes nothing from it (telling the client to retry would waste it). Our own
      // abort (the call's deadline, the client gone) keeps its meaning.
      if (whole && !this.#abort.signal.aborted) return null;
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
