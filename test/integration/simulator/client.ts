/**
 * Plain-HTTP helpers for talking to the upstream simulator in tests (no SDK, so the wire format is what
 * gets tested).
 */

/** A minimal chat completion request body. */
export interface ChatBody {
  model: string;
  messages: unknown[];
  [field: string]: unknown;
}

/** Options of {@link postChat}. */
export interface PostOptions {
  /** Routes through `/p/<provider>/v1/...` instead of `/v1/...`. */
  provider?: string;
  /** Bearer key; `null` sends no Authorization header. Defaults to `sk-test`. */
  key?: string | null;
  headers?: Record<string, string>;
}

/** POSTs a chat completion request and returns the raw response. */
export function postChat(baseUrl: string, body: unknown, options: PostOptions = {}): Promise<Response> {
  return postJson(baseUrl, '/v1/chat/completions', body, options);
}

/** POSTs a JSON body (or a raw string) to any API path, e.g. `/v1/embeddings`, and returns the response. */
export function postJson(
  baseUrl: string,
  path: string,
  body: unknown,
  options: PostOptions = {},
): Promise<Response> {
  return fetch(apiUrl(baseUrl, path, options), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...authHeader(options), ...options.headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** POSTs a multipart form (fetch sets the boundary) to any API path and returns the response. */
export function postForm(
  baseUrl: string,
  path: string,
  form: FormData,
  options: PostOptions = {},
): Promise<Response> {
  return fetch(apiUrl(baseUrl, path, options), {
    method: 'POST',
    headers: { ...authHeader(options), ...options.headers },
    body: form,
  });
}

function apiUrl(baseUrl: string, path: string, options: PostOptions): string {
  return `${baseUrl}${options.provider === undefined ? '' : `/p/${options.provider}`}${path}`;
}

function authHeader(options: PostOptions): Record<string, string> {
  const key = options.key === undefined ? 'sk-test' : options.key;
  return key === null ? {} : { authorization: `Bearer ${key}` };
}

/** Reads a response body as bytes, counting the chunks it arrived in and capturing a connection error. */
export async function readBytes(
  response: Response,
): Promise<{ bytes: Buffer; chunks: number; error: unknown }> {
  const parts: Uint8Array[] = [];
  try {
    for await (const chunk of response.body ?? []) parts.push(chunk);
    return { bytes: Buffer.concat(parts), chunks: parts.length, error: null };
  } catch (error) {
    return { bytes: Buffer.concat(parts), chunks: parts.length, error };
  }
}

/** A chat body with one user message. */
export function userChat(content: string, extra: Record<string, unknown> = {}): ChatBody {
  return { model: 'gpt-4o-mini', messages: [{ role: 'user', content }], ...extra };
}

/** What a client received from an event stream, including a connection error if there was one. */
export interface SseRead {
  /** Payloads of the `data:` events, in order (`[DONE]` included as the literal string). */
  data: string[];
  /** The error that ended the read early, if any. */
  error: unknown;
}

/** Reads an SSE response to its end (or until the connection fails) and splits it into data events. */
export async function readSse(response: Response): Promise<SseRead> {
  let text = '';
  let error: unknown = null;
  const decoder = new TextDecoder();
  try {
    for await (const chunk of response.body ?? []) text += decoder.decode(chunk, { stream: true });
  } catch (caught) {
    error = caught;
  }
  const data: string[] = [];
  // Only complete events (terminated by a blank line) count, as in a real SSE parser.
  const events = text.split('\n\n');
  events.pop();
  for (const event of events) {
    for (const line of event.split('\n')) {
      if (line.startsWith('data: ')) data.push(line.slice(6));
    }
  }
  return { data, error };
}

/** Reads a response body as text, capturing a mid-body connection error instead of throwing. */
export async function readText(response: Response): Promise<{ text: string; error: unknown }> {
  let text = '';
  const decoder = new TextDecoder();
  try {
    for await (const chunk of response.body ?? []) text += decoder.decode(chunk, { stream: true });
    return { text, error: null };
  } catch (error) {
    return { text, error };
  }
}

/** Settles a promise into a result or an error, for asserting that a request fails at the socket. */
export async function settle<T>(promise: Promise<T>): Promise<{ value: T | null; error: unknown }> {
  try {
    return { value: await promise, error: null };
  } catch (error) {
    return { value: null, error };
  }
}

/** True if `error` (or one of its causes) is a connection failure such as a reset or premature close. */
export function isSocketError(error: unknown): boolean {
  for (let current = error; current instanceof Error; current = current.cause) {
    const code = (current as { code?: unknown }).code;
    if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE') return true;
  }
  return false;
}
