import type { IncomingHttpHeaders } from 'node:http';
import { Agent, type Dispatcher } from 'undici';
import { BUSY, type FailureKind, type UpstreamErrorBody, UpstreamFailure } from '#core/fallback.ts';

export interface PostOptions {
  readonly url: URL;
  readonly headers: Record<string, string>;
  readonly body: string | Uint8Array;
  /** Longest wait for the response headers. */
  readonly headersTimeoutMs: number;
  /** Longest silence between body chunks. */
  readonly bodyTimeoutMs: number;
  readonly signal?: AbortSignal;
}

/** What the adapters read a response body with: undici's streaming body, or a body already read whole. */
export interface UpstreamBody extends AsyncIterable<Buffer> {
  destroy(): void;
}

export interface UpstreamResponse {
  readonly statusCode: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: UpstreamBody;
  /** On an error response: the key the request presented, which its error body may quote (see clientSafe). */
  readonly credential?: string | null;
}

/**
 * A body read whole before the response was handed over. `bytes` is there to be taken without iterating: an
 * async generator and its promises per call are garbage that a young-generation collection has to copy when it
 * finds them still referenced, and the non-stream path reads every body this way.
 */
export class WholeBody implements UpstreamBody {
  readonly bytes: Buffer;

  constructor(bytes: Buffer) {
    this.bytes = bytes;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Buffer, void, undefined> {
    if (this.bytes.length > 0) yield this.bytes;
  }

  destroy(): void {}
}

/**
 * One keep-alive connection pool per upstream origin (undici's Agent keeps a pool per origin), built once
 * per cold start. Transport errors come back as `UpstreamFailure`s that routing understands.
 */
export class UpstreamHttp {
  readonly #agent: Agent;

  constructor(connectionsPerOrigin: number) {
    this.#agent = new Agent({
      connections: connectionsPerOrigin,
      keepAliveTimeout: 30_000,
      keepAliveMaxTimeout: 120_000,
      connect: { timeout: 5_000 },
    });
  }

  async post(options: PostOptions): Promise<UpstreamResponse> {
    try {
      return await this.#agent.request({ ...dispatchOptions(options), signal: options.signal });
    } catch (error) {
      throw transportFailure(error);
    }
  }

  /**
   * A request whose response is read whole (non-stream calls), at most `limitBytes` of body: a larger one is a
   * protocol fault. It resolves once the body is complete — a body cut off mid-way rejects as a drop.
   *
   * Built on undici's `dispatch` rather than `request`, which builds an async resource and a Node stream for
   * every body: a bare proxy on `request` kept ~15 % of its allocation alive across young-generation
   * collections, the same proxy on `dispatch` ~1 % (--trace-gc-nvp, 16 clients on loopback). Long scavenges
   * are what every in-flight request waits out.
   */
  postWhole(options: PostOptions, limitBytes: number): Promise<UpstreamResponse> {
    return new Promise((resolve, reject) => {
      const { signal } = options;
      let controller: Dispatcher.DispatchController | null = null;
      const onAbort = () => controller?.abort(abortReason(signal));
      const settle = () => signal?.removeEventListener('abort', onAbort);
      const chunks: Buffer[] = [];
      let size = 0;
      let statusCode = 0;
      let headers: IncomingHttpHeaders = {};
      this.#agent.dispatch(dispatchOptions(options), {
        onRequestStart: (c) => {
          controller = c;
          if (signal?.aborted) c.abort(abortReason(signal));
          else signal?.addEventListener('abort', onAbort, { once: true });
        },
        onResponseStart: (_c, status, responseHeaders) => {
          statusCode = status;
          headers = responseHeaders;
        },
        onResponseData: (c, chunk) => {
          size += chunk.length;
          if (size > limitBytes) {
            c.abort(bodyTooLarge(limitBytes));
            return;
          }
          chunks.push(chunk);
        },
        onResponseEnd: () => {
          settle();
          const bytes = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
          resolve({ statusCode, headers, body: new WholeBody(bytes) });
        },
        onResponseError: (_c, error) => {
          settle();
          reject(transportFailure(error));
        },
      });
    });
  }

  close(): Promise<void> {
    return this.#agent.close();
  }
}

/** The request both ways of posting send. */
const dispatchOptions = (options: PostOptions): Dispatcher.DispatchOptions => ({
  origin: options.url.origin,
  path: `${options.url.pathname}${options.url.search}`,
  method: 'POST',
  headers: options.headers,
  body: options.body,
  headersTimeout: options.headersTimeoutMs,
  bodyTimeout: options.bodyTimeoutMs,
});

const TRANSPORT_KINDS: Readonly<Record<string, FailureKind>> = {
  UND_ERR_HEADERS_TIMEOUT: 'timeout',
  UND_ERR_BODY_TIMEOUT: 'timeout',
  UND_ERR_CONNECT_TIMEOUT: 'connect',
  ECONNREFUSED: 'connect',
  ENOTFOUND: 'connect',
  EAI_AGAIN: 'connect',
  EHOSTUNREACH: 'connect',
  UND_ERR_SOCKET: 'dropped',
  ECONNRESET: 'dropped',
  EPIPE: 'dropped',
  UND_ERR_CLOSED: 'dropped',
};

/** A reply larger than any sane one, read whole or in chunks: a protocol fault, not worth another key. */
export const bodyTooLarge = (limitBytes: number): UpstreamFailure =>
  new UpstreamFailure('protocol', `upstream body exceeds ${limitBytes} bytes`);

/** Maps an undici or socket error to a routing failure. Aborts (ours) pass through unchanged. */
export const transportFailure = (error: unknown): unknown => {
  if (error instanceof UpstreamFailure) return error;
  const code = errorCode(error);
  if (code === 'UND_ERR_ABORTED' || (error instanceof Error && error.name === 'AbortError')) return error;
  const kind: FailureKind = (code === undefined ? undefined : TRANSPORT_KINDS[code]) ?? 'dropped';
  return new UpstreamFailure(kind, `upstream ${kind}${code ? ` (${code})` : ''}`, { cause: error });
};

const errorCode = (error: unknown): string | undefined => {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
  }
  return undefined;
};

/** What an error's `type`, `code` and `param` look like; anything else is dropped. */
const NAME = /^[\w.[\]-]{1,64}$/;

/**
 * An upstream's error message, fit to reach our client: a refusal of the request itself (a 400: context too long,
 * a bad schema) is passed on, because it tells the client what to change — but the text is the upstream's, and a
 * verbose or misconfigured one can put in it what must not leave us: the key it was sent, an internal address, a
 * file path. Those are masked and the text is cut short.
 */
export const clientSafe = (message: string, credential: string | null = null): string => {
  // Cut first (every rule below is linear, but a 64 KiB message need not be read whole), then again after.
  // A key cut in two by the slice would match no rule: a run cut at the end is dropped.
  const cut =
    message.length <= 4 * MAX_RELAYED_MESSAGE
      ? message
      : message.slice(0, 4 * MAX_RELAYED_MESSAGE).replace(/[^\s"',;]+$/, '');
  // The key we sent, in whatever format, first: the patterns below only guess at what a key looks like.
  const masked = withoutCredential(cut, credential)
    .replace(/\b(Bearer|Basic)\s+[^\s"',;]+/gi, '$1 [redacted]')
    // Providers' key formats (OpenAI, Anthropic, Groq, xAI, Hugging Face, Google, NVIDIA, …) …
    .replace(/\b(?:sk|gsk|xai|hf|nvapi|pk|rk|sess)[-_][\w-]{16,}|\bAIza[\w-]{30,}/g, '[redacted]')
    // … and a token in another format: a run with one `-`/`_`-separated piece of 20 or more characters mixing
    // letters and digits (hex, base62 and base64 keys do; names such as `search_documents_v2` or dates do not).
    .replace(/[\w+/=-]{20,}/g, (run) => (run.split(/[-_]/).some(isKeyLike) ? '[redacted]' : run))
    .replace(/\b(api[-_]?key|token|secret|password)(["']?\s*[=:]\s*["']?)[^\s"',;]{8,}/gi, '$1$2[redacted]')
    .replace(/\b[a-z][\w+.-]{0,15}:\/\/[^\s"'<>]+/gi, '[url]')
    .replace(/\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b/g, '[address]')
    // host:port, its labels starting with letters (not a field path such as `messages.0.content:12`) …
    .replace(/\b[a-z][\w-]{0,62}(?:\.[a-z][\w-]{0,62}){1,8}:\d{2,5}\b/gi, '[address]')
    // … and a bare host name in a private or cloud-internal domain.
    .replace(INTERNAL_HOST, '[address]')
    // File paths: from a root, three segments or more (not a JSON pointer's `#/properties/x`).
    .replace(/(?<![\w#/.])(?:\/[\w.@$-]+){3,}/g, (path) => (SCHEMA_POINTER.test(path) ? path : '[path]'));
  return masked.length <= MAX_RELAYED_MESSAGE ? masked : `${masked.slice(0, MAX_RELAYED_MESSAGE)}…`;
};

const MAX_RELAYED_MESSAGE = 500;

const INTERNAL_HOST =
  /\b[a-z0-9][\w-]{0,62}(?:\.[a-z0-9][\w-]{0,62}){0,8}\.(?:local|localdomain|internal|intranet|intra|lan|corp|home|svc|amazonaws\.com)\b/gi;

/** Shortest piece of our key that counts as quoting it (providers show a key's first and last few characters). */
const CREDENTIAL_PIECE = 8;

/** Every run of `text` that shares CREDENTIAL_PIECE characters in a row with the key, masked. */
const withoutCredential = (text: string, credential: string | null): string => {
  if (credential === null || credential.length < CREDENTIAL_PIECE) return text;
  const pieces = new Set<string>();
  for (let i = 0; i + CREDENTIAL_PIECE <= credential.length; i++)
    pieces.add(credential.slice(i, i + CREDENTIAL_PIECE));
  return text.replace(/[^\s"',;()[\]{}<>]{8,}/g, (run) => {
    for (let i = 0; i + CREDENTIAL_PIECE <= run.length; i++)
      if (pieces.has(run.slice(i, i + CREDENTIAL_PIECE))) return '[redacted]';
    return run;
  });
};

/** A JSON pointer into a schema, which tells the client which field to fix. */
const SCHEMA_POINTER =
  /^\/(?:properties|items|prefixItems|\$defs|definitions|anyOf|oneOf|allOf|additionalProperties)\//;

const isKeyLike = (piece: string): boolean =>
  piece.length >= 20 && /\d/.test(piece) && /[A-Za-z]/.test(piece);

/** Largest error body read from an upstream; enough for any real error object. */
const MAX_ERROR_BODY = 64 * 1024;

/**
 * Classifies a non-2xx upstream response, reading (a bounded amount of) its OpenAI-style error body.
 * 4xx other than auth, 404, 413 and 429 mean the request itself was refused: no other deployment will differ (but for
 * what readBody reads otherwise).
 */
export const statusFailure = async (response: UpstreamResponse): Promise<UpstreamFailure> => {
  const status = response.statusCode;
  const upstreamError = await readErrorBody(response);
  const read = upstreamError ? readBody(status, upstreamError) : null;
  if (read) return new UpstreamFailure(read.kind, read.detail, { status, upstreamError: read.error });
  // A proxy's or gateway's limit on the request's size: another deployment's may be larger.
  if (status === 413)
    return new UpstreamFailure('unsupported', 'upstream status 413', {
      status,
      upstreamError: TOO_LARGE_TO_SEND,
    });
  let kind: FailureKind;
  // Busy, said three ways: OpenAI's 429 engine_overloaded, a 503 with that code, and the 529 of Anthropic's API
  // that proxies in front of it pass on. All-busy is then the client's 429 engine_overloaded (spec §7), not a 500.
  if (status === 529 || ((status === 429 || status === 503) && upstreamError?.code === 'engine_overloaded'))
    kind = 'overloaded';
  else if (status === 429) kind = 'rate_limited';
  // 402: our account with the provider cannot pay — like a bad key, the deployment's fault, not the request's.
  else if (status === 401 || status === 402 || status === 403) kind = 'auth';
  else if (status >= 500 || status === 404 || status === 408 || status === 409) kind = 'server_error';
  else if (status >= 400) kind = 'rejected';
  else kind = 'protocol';
  return new UpstreamFailure(
    kind,
    `upstream status ${status}${upstreamError?.code ? ` (${upstreamError.code})` : ''}`,
    {
      status,
      upstreamError,
      retryAfterMs: BUSY.has(kind) ? retryAfterMs(response.headers) : null,
    },
  );
};

/** What the client is told when every deployment found its request too large (the upstream's text names its org). */
export const REQUEST_TOO_LARGE: UpstreamErrorBody = {
  message:
    "The request is larger than this model's providers accept in one call. Shorten the messages or lower max_tokens.",
  type: 'invalid_request_error',
  code: 'request_too_large',
  param: null,
};

/** …when every deployment's provider refused the request's size (413: a proxy's limit; any endpoint). */
const TOO_LARGE_TO_SEND: UpstreamErrorBody = {
  message: "The request is larger than this model's providers accept. Send less in one request.",
  type: 'invalid_request_error',
  code: 'request_too_large',
  param: null,
};

/** …when every deployment's provider routes nothing that supports the request (the upstream's text names them). */
const NO_PROVIDER_SUPPORTS: UpstreamErrorBody = {
  message:
    "None of this model's providers supports this request (its tools, response format or parameters). Remove what it needs, or choose another model.",
  type: 'invalid_request_error',
  code: 'unsupported_request',
  param: null,
};

/** …when a provider's moderation refused the request (its text names the provider and the flagged categories). */
const FLAGGED: UpstreamErrorBody = {
  message: "The request was refused by the upstream provider's content moderation.",
  type: 'invalid_request_error',
  code: 'content_policy_violation',
  param: null,
};

/** Error codes OpenAI-compatible providers answer with a 400 that are the deployment's, not the request's. */
const DEPLOYMENT_CODES: ReadonlySet<string> = new Set(['model_decommissioned', 'model_not_found']);

/**
 * Upstream errors whose status alone would misjudge them — and a client could then make one deployment's fault its own
 * 400, or its own request a deployment's fault that opens a circuit for everyone. Null: the status says it.
 * - 429 "Request too large … on tokens per min": larger than our key's per-minute quota there. No wait cures it and
 *   it is no load; another deployment may take it.
 * - 404 "No endpoints found that support …" (OpenRouter): nothing behind this deployment supports the request's
 *   tools or parameters; another deployment may.
 * - 403 flagged by the provider's moderation: the request's content, which another deployment need not take either.
 * - 400 with a retired or unknown upstream model (by its code): the deployment's fault, not the request's.
 * - 400 context_length_exceeded (by its code): too long for this deployment's window, which another's may exceed.
 * Messages are matched only where their words are the provider's own: an error message may quote the client's
 * request (a tool named "api-key" in an invalid schema), and a client must not be able to word its way into a
 * deployment's fault.
 */
const readBody = (
  status: number,
  error: UpstreamErrorBody,
): { kind: FailureKind; detail: string; error: UpstreamErrorBody } | null => {
  const { message, code } = error;
  if (status === 429 && /\brequest too large\b/i.test(message))
    return {
      kind: 'unsupported',
      detail: 'upstream status 429 (request too large for its quota)',
      error: REQUEST_TOO_LARGE,
    };
  // Not "No endpoints found for <model>": that is the deployment's model gone, its own fault.
  if (status === 404 && /\bno endpoints found that support\b/i.test(message))
    return {
      kind: 'unsupported',
      detail: 'upstream status 404 (no endpoint supports the request)',
      error: NO_PROVIDER_SUPPORTS,
    };
  if (status === 403 && /\b(?:flagged|moderation)\b/i.test(message))
    return { kind: 'rejected', detail: 'upstream status 403 (flagged by moderation)', error: FLAGGED };
  if (status === 400 && code !== null && DEPLOYMENT_CODES.has(code))
    return { kind: 'server_error', detail: `upstream status 400 (${code})`, error };
  // Too long for this provider's window (smaller than the model's, or counted another way): a deployment with a
  // larger one may serve it; when none can, the client gets this refusal (every attempt unsupported: fallback.ts).
  if (status === 400 && code === 'context_length_exceeded')
    return { kind: 'unsupported', detail: 'upstream status 400 (context_length_exceeded)', error };
  return null;
};

/**
 * How long a busy upstream asks to be left alone: `retry-after-ms` (OpenAI's, precise) before `retry-after`
 * (seconds, or an HTTP date). Null when it says nothing usable; routing then assumes a second.
 */
/** A non-negative decimal number, as both headers write theirs (`Number('')` would read an empty one as 0). */
const SECONDS = /^\s*\d+(\.\d+)?\s*$/;

export const retryAfterMs = (headers: IncomingHttpHeaders, now = Date.now()): number | null => {
  const precise = headers['retry-after-ms'];
  if (typeof precise === 'string' && SECONDS.test(precise)) return Number(precise);
  const value = headers['retry-after'];
  if (typeof value !== 'string' || value.trim() === '') return null;
  if (SECONDS.test(value)) return Number(value) * 1000;
  // An HTTP date names its weekday and month ("Sun, 29 Nov 2026 12:00:20 GMT"); Date.parse alone would also take
  // "-3" as a year.
  const at = /[a-z]{3}/i.test(value) ? Date.parse(value) : Number.NaN;
  return Number.isNaN(at) ? null : Math.max(0, at - now);
};

/**
 * Reads (a bounded amount of) an error body shaped `{"error":{"message",…}}` — OpenAI's, and Anthropic's
 * `{"type":"error","error":{"type","message"}}` alike. Null when it is not one.
 */
export const readErrorBody = async (response: UpstreamResponse): Promise<UpstreamErrorBody | null> => {
  let text = '';
  try {
    for await (const chunk of response.body) {
      text += Buffer.from(chunk).toString('utf8');
      if (text.length > MAX_ERROR_BODY) {
        response.body.destroy();
        break;
      }
    }
    const error = (JSON.parse(text) as { error?: Record<string, unknown> }).error;
    if (!error || typeof error.message !== 'string') return null;
    const credential = response.credential ?? null;
    // A name the masking would change (a key-like run, the key itself) is dropped, not passed on masked.
    const name = (v: unknown) =>
      typeof v === 'string' && NAME.test(v) && clientSafe(v, credential) === v ? v : null;
    return {
      message: clientSafe(error.message, credential),
      type: name(error.type),
      code: name(error.code),
      param: name(error.param),
    };
  } catch {
    return null;
  }
};

/** Why a caller's abort ended a request: its reason, as `request` would reject with it. */
const abortReason = (signal: AbortSignal | undefined): Error =>
  signal?.reason instanceof Error
    ? signal.reason
    : Object.assign(new Error('This operation was aborted'), { name: 'AbortError' });
