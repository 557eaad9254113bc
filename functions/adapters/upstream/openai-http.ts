import { UpstreamFailure } from '#core/fallback.ts';
import type { Deployment } from '#core/registry.ts';
import type { UpstreamTarget } from '#core/upstream.ts';
import type { UpstreamConfig } from '#functions/config.ts';
import {
  bodyTooLarge,
  transportFailure,
  type UpstreamHttp,
  type UpstreamResponse,
  WholeBody,
} from './http.ts';
import type { KeyRing } from './key-ring.ts';

export interface OpenAiPost {
  /** Path below the deployment's base URL, e.g. `/embeddings`. */
  readonly path: string;
  readonly body: string | Uint8Array;
  readonly contentType: string;
  readonly accept: string;
  readonly headersTimeoutMs: number;
  /** Read the whole body (at most this many bytes) before resolving, for non-stream calls. */
  readonly wholeBodyLimitBytes?: number;
}

/**
 * The headers that present a deployment's key (null: the deployment has none) and anything else every
 * request of a provider protocol carries. Built per request, so it must be cheap.
 */
export type AuthHeaders = (key: string | null) => Readonly<Record<string, string>>;

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});

/** OpenAI's scheme, the default: `Authorization: Bearer <key>`. */
export const bearerAuth: AuthHeaders = (key) =>
  key === null ? NO_HEADERS : { authorization: `Bearer ${key}` };

/**
 * The request side shared by every OpenAI-compatible endpoint: the deployment's URL for a path, its key for
 * the attempt (core chose the index), and the timeouts. Endpoint adapters add only their body and parsing.
 * Other protocols with the same shape (Anthropic's Messages API) reuse it with their own `auth` headers.
 */
export class OpenAiHttp {
  readonly #http: UpstreamHttp;
  readonly #keys: KeyRing;
  readonly #auth: AuthHeaders;
  readonly config: UpstreamConfig;
  readonly #urls = new WeakMap<Deployment, Map<string, URL>>();

  constructor(http: UpstreamHttp, keys: KeyRing, config: UpstreamConfig, auth: AuthHeaders = bearerAuth) {
    this.#http = http;
    this.#keys = keys;
    this.#auth = auth;
    this.config = config;
  }

  async post(target: UpstreamTarget, request: OpenAiPost): Promise<UpstreamResponse> {
    const key = await this.#keys.key(target.deployment, target.keyIndex);
    const headers: Record<string, string> = {
      'content-type': request.contentType,
      accept: request.accept,
      ...this.#auth(key),
    };
    const options = {
      url: this.#url(target.deployment, request.path),
      headers,
      body: request.body,
      headersTimeoutMs: request.headersTimeoutMs,
      bodyTimeoutMs: target.deployment.timeouts?.idleMs ?? this.config.idleTimeoutMs,
      ...(target.signal ? { signal: target.signal } : {}),
    };
    const response = await (request.wholeBodyLimitBytes === undefined
      ? this.#http.post(options)
      : this.#http.postWhole(options, request.wholeBodyLimitBytes));
    if (response.statusCode === 401 || response.statusCode === 403)
      this.#keys.refused(target.deployment, target.keyIndex);
    if (response.statusCode === 200 || key === null) return response;
    // Some providers quote the key they were sent in their error text, which a 400 passes on to our client.
    return {
      statusCode: response.statusCode,
      headers: response.headers,
      body: response.body,
      credential: key,
    };
  }

  /** How long a whole (non-stream) reply may take to start, for this deployment. */
  completionTimeoutMs(deployment: Deployment): number {
    return deployment.timeouts?.firstByteMs ?? this.config.completionTimeoutMs;
  }

  /** How long a streamed reply may take to deliver its first event or chunk, for this deployment. */
  firstByteTimeoutMs(deployment: Deployment): number {
    return deployment.timeouts?.firstByteMs ?? this.config.streamFirstByteTimeoutMs;
  }

  #url(deployment: Deployment, path: string): URL {
    // Deployment objects belong to a registry snapshot: their URLs are parsed once and go with the snapshot.
    let urls = this.#urls.get(deployment);
    if (!urls) {
      urls = new Map();
      this.#urls.set(deployment, urls);
    }
    let url = urls.get(path);
    if (!url) {
      url = new URL(`${deployment.baseUrl.replace(/\/+$/, '')}${path}`);
      urls.set(path, url);
    }
    return url;
  }
}

/**
 * Reads a whole upstream body, at most `limitBytes`. A body cut off mid-way is a drop (worth another
 * deployment); one larger than any sane reply is a protocol fault.
 */
export const readAll = async (response: UpstreamResponse, limitBytes: number): Promise<Buffer> => {
  if (response.body instanceof WholeBody) {
    if (response.body.bytes.length <= limitBytes) return response.body.bytes;
    throw bodyTooLarge(limitBytes);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of response.body) {
      size += chunk.length;
      if (size > limitBytes) {
        response.body.destroy();
        throw bodyTooLarge(limitBytes);
      }
      chunks.push(chunk);
    }
  } catch (error) {
    throw transportFailure(error);
  }
  // A streamed body that came in one chunk needs no copy.
  return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
};

/** Reads a JSON object body; anything else is a protocol fault, a cut-off body a drop. */
export const readJsonObject = async (
  response: UpstreamResponse,
  limitBytes: number,
): Promise<Record<string, unknown>> => parseJsonObject(await readAll(response, limitBytes));

/** An upstream body that must be a JSON object; anything else is a protocol fault. */
export const parseJsonObject = (bytes: Buffer): Record<string, unknown> => {
  let body: unknown;
  try {
    body = JSON.parse(bytes.toString('utf8'));
  } catch (error) {
    throw new UpstreamFailure('protocol', 'upstream body is not JSON', { cause: error });
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new UpstreamFailure('protocol', 'upstream body is not a JSON object');
  }
  return body as Record<string, unknown>;
};

/** The abort reason of a first-byte deadline, told apart from the caller's own abort. */
class FirstByteTimeout extends Error {
  override readonly name = 'FirstByteTimeout';
}

/**
 * Opens a streamed upstream response under the deployment's first-byte deadline: `open` sends the request with
 * `abort.signal` and resolves once the first event (or audio bytes) has arrived — the point where the deployment
 * is committed. One deadline covers the headers and that first piece; the caller's own abort ends it too.
 * `release` detaches the caller's abort: `open` hands it to whatever reads the rest of the response. A failure
 * on the way aborts the request and becomes an `UpstreamFailure` (`timeout` past the deadline), so fallback can
 * try the next deployment.
 */
export const openWithinFirstByte = async <T>(
  call: UpstreamTarget,
  firstByteMs: number,
  firstPiece: string,
  open: (abort: AbortController, release: () => void) => Promise<T>,
): Promise<T> => {
  const abort = new AbortController();
  const onCallerAbort = () => abort.abort();
  const release = () => call.signal?.removeEventListener('abort', onCallerAbort);
  call.signal?.addEventListener('abort', onCallerAbort, { once: true });
  const deadline = setTimeout(() => abort.abort(new FirstByteTimeout()), firstByteMs);
  try {
    return await open(abort, release);
  } catch (error) {
    release();
    const timedOut = abort.signal.reason instanceof FirstByteTimeout;
    abort.abort();
    if (timedOut) {
      throw new UpstreamFailure('timeout', `no ${firstPiece} within ${firstByteMs} ms`, { cause: error });
    }
    throw transportFailure(error);
  } finally {
    clearTimeout(deadline);
  }
};
