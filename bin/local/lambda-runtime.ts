import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';

/**
 * A local stand-in for the parts of the Lambda Node.js runtime that response-streaming handlers use:
 * the `awslambda.streamifyResponse` / `awslambda.HttpResponseStream` globals and the response stream
 * itself. It speaks the same byte protocol as the real runtime — `HttpResponseStream.from` sets the
 * content type `application/vnd.awslambda.http-integration-response` and writes a JSON prelude plus eight
 * NUL bytes before the body — and the stream decodes that prelude into the HTTP status line and headers,
 * as the Function URL front end does. So a handler that works here works on Lambda.
 */

const STREAMING = Symbol.for('aws.lambda.runtime.handler.streaming');
const INTEGRATION_CONTENT_TYPE = 'application/vnd.awslambda.http-integration-response';
const DELIMITER_LENGTH = 8;

export type StreamingHandler = (
  event: unknown,
  responseStream: LambdaResponseStream,
  context: unknown,
) => Promise<unknown>;

interface Prelude {
  statusCode?: number;
  headers?: Record<string, string>;
  cookies?: string[];
}

/** The writable a streaming handler receives: bytes go to the client as they are written. */
export class LambdaResponseStream extends Writable {
  /** Set by `HttpResponseStream.from`; runs once, right before the first write. */
  _onBeforeFirstWrite: ((write: (chunk: string | Uint8Array) => void) => void) | undefined;
  readonly #res: ServerResponse;
  #contentType = 'application/octet-stream';
  #written = false;
  /** Prelude bytes while they are still arriving; null once the HTTP head is out. */
  #prelude: Buffer[] | null = [];
  #zeros = 0;
  /**
   * An event stream's first body bytes leave at once, with the head, instead of waiting for the end of the turn:
   * they are what its client waits for (time to first token), and when an upstream's events arrive together the
   * relay of all of them would otherwise come first. Set when the head says `text/event-stream`.
   */
  #sendNextAtOnce = false;

  constructor(res: ServerResponse) {
    super({ highWaterMark: 16 * 1024 });
    this.#res = res;
  }

  setContentType(contentType: string): void {
    if (this.#written) throw new Error('Cannot set content-type, too late.');
    this.#contentType = contentType;
  }

  override write(chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
    if (!this.#written) {
      this.#written = true;
      this._onBeforeFirstWrite?.((c) => super.write(c));
    }
    return (super.write as (...args: unknown[]) => boolean)(chunk, encoding, callback);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    let body = chunk;
    if (this.#prelude !== null) {
      if (this.#contentType !== INTEGRATION_CONTENT_TYPE) {
        this.#writeHead({ headers: { 'content-type': this.#contentType } });
      } else {
        const rest = this.#consumePrelude(chunk);
        if (rest === null) {
          callback();
          return;
        }
        body = rest;
      }
    }
    let atOnce = false;
    if (body.length > 0) {
      this.#hold(body);
      atOnce = this.#sendNextAtOnce;
      this.#sendNextAtOnce = false;
    }
    if (atOnce || this.#heldBytes >= this.writableHighWaterMark) this.#release(callback, atOnce);
    else callback();
  }

  override _final(callback: (error?: Error | null) => void): void {
    // Ended before any body byte: still a complete response (an empty body, or a prelude-only one).
    if (this.#prelude !== null) this.#writeHead(this.#endedPrelude());
    const rest = this.#takeHeld();
    // One write carries the last bytes and the chunked-encoding terminator (and the head, if still unsent).
    if (rest) this.#res.end(rest, () => callback());
    else this.#res.end(() => callback());
  }

  /**
   * Bytes written in one turn of the event loop (a burst of stream events, or head and body) are held and
   * handed to the socket together at the end of the turn: one packet instead of one per write, without
   * delaying anything past the current turn.
   */
  #held: Buffer[] = [];
  #heldBytes = 0;
  #releaseScheduled = false;

  #hold(body: Buffer): void {
    this.#held.push(body);
    this.#heldBytes += body.length;
    if (this.#releaseScheduled) return;
    this.#releaseScheduled = true;
    setImmediate(() => {
      this.#releaseScheduled = false;
      if (!this.#res.writableEnded) this.#release(null);
    });
  }

  #takeHeld(): Buffer | null {
    if (this.#held.length === 0) return null;
    const bytes =
      this.#held.length === 1 ? (this.#held[0] as Buffer) : Buffer.concat(this.#held, this.#heldBytes);
    this.#held = [];
    this.#heldBytes = 0;
    return bytes;
  }

  /**
   * Writes the held bytes; `callback` (if any) waits for the socket to drain when it is backed up. `now` hands them
   * to the kernel at once: Node's ServerResponse corks its socket on a write and uncorks it on the next tick, and
   * the next tick comes only once the microtask queue is empty — where the relay of the events that arrived with
   * an event stream's first one runs, so that first event would leave with the last of them. (Node's own uncork
   * on the next tick then finds nothing corked.)
   */
  #release(callback: ((error?: Error | null) => void) | null, now = false): void {
    const bytes = this.#takeHeld();
    if (bytes) this.#res.write(bytes);
    if (now) this.#res.socket?.uncork();
    if (!callback) return;
    if (this.#res.writableNeedDrain) this.#res.once('drain', () => callback());
    else callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (error && !this.#res.writableEnded) this.#res.destroy();
    callback(error);
  }

  #endedPrelude(): Prelude {
    if (this.#contentType !== INTEGRATION_CONTENT_TYPE)
      return { headers: { 'content-type': this.#contentType } };
    const raw = Buffer.concat(this.#prelude ?? [])
      .toString('utf8')
      .replace(/\0+$/, '');
    return raw ? (JSON.parse(raw) as Prelude) : {};
  }

  /** Feeds prelude bytes; returns the body bytes after the delimiter once it is complete, else null. */
  #consumePrelude(chunk: Buffer): Buffer | null {
    for (let i = 0; i < chunk.length; i++) {
      if (chunk[i] !== 0) {
        // No zero byte in the JSON: skip straight to the next zero (the delimiter's, normally).
        this.#zeros = 0;
        const zero = chunk.indexOf(0, i + 1);
        if (zero === -1) break;
        i = zero - 1;
        continue;
      }
      if (++this.#zeros < DELIMITER_LENGTH) continue;
      (this.#prelude as Buffer[]).push(chunk.subarray(0, i + 1));
      const raw = Buffer.concat(this.#prelude as Buffer[]).toString('utf8');
      this.#writeHead(JSON.parse(raw.slice(0, raw.length - DELIMITER_LENGTH)) as Prelude);
      return chunk.subarray(i + 1);
    }
    (this.#prelude as Buffer[]).push(chunk);
    return null;
  }

  #writeHead(prelude: Prelude): void {
    this.#prelude = null;
    const headers: Record<string, string | string[]> = { ...prelude.headers };
    if (prelude.cookies?.length) headers['set-cookie'] = prelude.cookies;
    this.#sendNextAtOnce = /^text\/event-stream/i.test(String(headers['content-type'] ?? ''));
    // The head leaves with the first body bytes (or the end), in the same packet.
    this.#res.writeHead(prelude.statusCode ?? 200, headers);
  }
}

const HttpResponseStream = {
  from(stream: LambdaResponseStream, prelude: Prelude): LambdaResponseStream {
    stream.setContentType(INTEGRATION_CONTENT_TYPE);
    const json = JSON.stringify(prelude);
    stream._onBeforeFirstWrite = (write) => {
      write(json);
      write(new Uint8Array(DELIMITER_LENGTH));
    };
    return stream;
  },
};

/**
 * Installs the `awslambda` global members the Lambda runtime provides. The object itself may already
 * exist: the AWS SDK (via @aws/lambda-invoke-store) creates an empty `awslambda` on import.
 */
export const installLambdaGlobals = (): void => {
  const scope = globalThis as { awslambda?: Record<string, unknown> };
  scope.awslambda ??= {};
  const awslambda = scope.awslambda;
  awslambda.streamifyResponse ??= (handler: StreamingHandler) =>
    Object.assign(handler, { [STREAMING]: 'response' });
  awslambda.HttpResponseStream ??= HttpResponseStream;
};

export const isStreamingHandler = (handler: unknown): handler is StreamingHandler =>
  typeof handler === 'function' && (handler as unknown as Record<symbol, unknown>)[STREAMING] === 'response';
