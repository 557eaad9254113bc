/**
 * Small node:http helpers shared by every simulator endpoint: body reading, JSON responses, cancellable
 * delays and deliberate connection drops.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Largest request body accepted; bigger bodies get HTTP 413. Generous because prompts can be long. */
export const MAX_BODY_BYTES = 32 * 1024 * 1024;

/** Thrown by {@link readBody} when the body exceeds {@link MAX_BODY_BYTES}. */
export class BodyTooLargeError extends Error {
  override name = 'BodyTooLargeError';
}

/** One request/response pair plus the timing helpers endpoints need. */
export class Exchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;

  constructor(req: IncomingMessage, res: ServerResponse) {
    this.req = req;
    this.res = res;
  }

  /** True once the client connection is gone (or was dropped on purpose); further writes are pointless. */
  get gone(): boolean {
    const socket = this.res.socket;
    return this.res.destroyed || socket === null || socket.destroyed;
  }

  /**
   * Waits `ms` milliseconds. Resolves false early if the connection closes meanwhile, so a long injected
   * latency neither outlives its client nor keeps a closing simulator's event loop alive.
   */
  sleep(ms: number): Promise<boolean> {
    if (this.gone) return Promise.resolve(false);
    if (ms <= 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const onClose = (): void => {
        clearTimeout(timer);
        resolve(false);
      };
      const timer = setTimeout(() => {
        this.res.off('close', onClose);
        resolve(!this.gone);
      }, ms);
      this.res.once('close', onClose);
    });
  }

  /**
   * Closes the connection abruptly, after flushing whatever was already written, so the client sees the
   * partial response followed by a connection error (no HTTP-level completion).
   */
  drop(): void {
    const socket = this.res.socket;
    if (socket === null || socket.destroyed) return;
    socket.end(() => socket.destroy());
  }
}

/** Reads the whole request body. Rejects with {@link BodyTooLargeError} past `limit` bytes. */
export function readBody(req: IncomingMessage, limit: number = MAX_BODY_BYTES): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      // Keep draining rather than destroying, so the 413 can still be delivered.
      if (size <= limit) chunks.push(chunk);
    });
    req.on('end', () => {
      if (size > limit) reject(new BodyTooLargeError(`Request body exceeds ${limit} bytes.`));
      else resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size));
    });
    req.on('error', reject);
    // A client that disconnects mid-body never sends 'end'; without this the handler would hang forever.
    req.on('close', () => {
      if (!req.complete) reject(new Error('Client closed the connection before sending the whole body.'));
    });
  });
}

/** Parses a UTF-8 JSON body; returns `undefined` (never a valid JSON value) when it is not JSON. */
export function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
}

/** Sends a complete JSON response. `body` may be pre-serialised to avoid a second stringify. */
export function sendJson(ex: Exchange, status: number, body: unknown): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  ex.res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  ex.res.end(text);
}

/** Sends a complete text response (plain text, subtitles, ...) with the given content type. */
export function sendText(ex: Exchange, status: number, text: string, contentType: string): void {
  ex.res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text) });
  ex.res.end(text);
}

/**
 * Sends 200 headers announcing the full JSON body, writes roughly its first half and drops the
 * connection: the client sees a truncated body.
 */
export function sendTruncatedJson(ex: Exchange, text: string): void {
  sendTruncated(ex, text, 'application/json');
}

/** {@link sendTruncatedJson} for any content type: 200, the full length announced, half the body sent. */
export function sendTruncated(ex: Exchange, text: string, contentType: string): void {
  const bytes = Buffer.from(text, 'utf8');
  ex.res.writeHead(200, { 'content-type': contentType, 'content-length': bytes.length });
  ex.res.write(bytes.subarray(0, Math.floor(bytes.length / 2)));
  ex.drop();
}

/**
 * Writes one chunk of a streamed body, waiting for the socket to drain when its buffer is full so a slow
 * client cannot make the simulator buffer a whole audio file. Resolves false once the client is gone.
 */
export function writeChunk(ex: Exchange, chunk: Uint8Array): Promise<boolean> {
  if (ex.gone) return Promise.resolve(false);
  if (ex.res.write(chunk)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (): void => {
      ex.res.off('drain', done);
      ex.res.off('close', done);
      resolve(!ex.gone);
    };
    ex.res.once('drain', done);
    ex.res.once('close', done);
  });
}

/** Extracts the key of an `Authorization: Bearer <key>` header; null when missing or empty. */
export function bearerKey(header: string | undefined): string | null {
  if (header === undefined || header.length < 8) return null;
  if (header.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  const key = header.slice(7).trim();
  return key === '' ? null : key;
}
