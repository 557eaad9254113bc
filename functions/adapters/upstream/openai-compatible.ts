import { UpstreamFailure } from '#core/fallback.ts';
import type { Deployment } from '#core/registry.ts';
import type {
  ChatCompletionResult,
  ChatProvider,
  ChatStream,
  ChatStreamEvent,
  StreamMode,
  UpstreamCall,
} from '#core/upstream.ts';
import { parseOpenAiUsage } from '#core/usage.ts';
import { statusFailure } from './http.ts';
import { type OpenAiHttp, openWithinFirstByte, parseJsonObject, readJsonObject } from './openai-http.ts';
import { type EventLimit, MAX_EVENT_LENGTH, sseData, UpstreamEvents } from './sse.ts';
import { chatCompletionOf, KeptBody, WholeReplyStream } from './whole-reply-stream.ts';

/**
 * Adapter for OpenAI-compatible chat completions (OpenAI, Groq, Together, Fireworks, DeepInfra, Mistral,
 * vLLM, Ollama, …): the wire format is already ours, so requests pass through and stream events are
 * relayed as text. Per event we only relabel the model and look for the usage chunk; JSON is parsed
 * only for the chunk that carries usage.
 */
export class OpenAiCompatibleChat implements ChatProvider {
  readonly #http: OpenAiHttp;
  /**
   * Deployments that answered a stream request with a whole reply lately (id → until when, ms): for a while their
   * stream calls ask for the whole reply, within a whole reply's timeout, and serve it as a stream.
   */
  readonly #notStreaming = new Map<string, number>();
  readonly #now: () => number;

  constructor(http: OpenAiHttp, now: () => number = Date.now) {
    this.#http = http;
    this.#now = now;
  }

  async complete(call: UpstreamCall): Promise<ChatCompletionResult> {
    const response = await this.#post(call, this.#http.completionTimeoutMs(call.deployment));
    if (response.statusCode !== 200) throw await statusFailure(response);
    const body = chatCompletionOf(
      await readJsonObject(response, MAX_REPLY_BYTES),
      call.publicModel,
      this.#now,
    );
    return { body, usage: parseOpenAiUsage(body.usage) };
  }

  stream(call: UpstreamCall): Promise<ChatStream> {
    const id = call.deployment.id;
    const mode = this.streamMode(call.deployment);
    if (mode === 'whole') return this.#wholeAsStream(call);
    if (mode === 'recheck') this.#notStreaming.delete(id);
    // The first stream call after a mark ran out asks to stream again, but may get a whole reply once more: it waits
    // as long as a whole reply may take, not a first event's time, lest a long one be cut and paid for for nothing.
    const firstByteMs =
      mode === 'stream'
        ? this.#http.firstByteTimeoutMs(call.deployment)
        : Math.max(
            this.#http.firstByteTimeoutMs(call.deployment),
            this.#http.completionTimeoutMs(call.deployment),
          );
    return openWithinFirstByte(call, firstByteMs, 'first event', async (abort, release) => {
      const response = await this.#post({ ...call, signal: abort.signal }, firstByteMs);
      if (response.statusCode !== 200) throw await statusFailure(response);
      // A JSON-labelled body may be a whole reply (an upstream that ignores `stream`), or a real event stream some
      // servers label so: which one, its body tells. It is kept while it is read, until an event shows it a stream.
      const kept = /^application\/json\b/i.test(String(response.headers['content-type'] ?? ''))
        ? new KeptBody(response.body, MAX_REPLY_BYTES)
        : null;
      // A whole reply reads as one unfinished event: it may be as large as any reply, until an event shows the body a
      // stream, whose events are then held to the usual limit.
      const limit: EventLimit | undefined = kept ? { maxEventLength: MAX_REPLY_BYTES } : undefined;
      const events = sseData(kept ?? response.body, limit);
      let first = await events.next();
      // Empty keep-alive objects before the first chunk commit nothing: the first-byte timeout still runs.
      while (!first.done && EMPTY_OBJECT.test(first.value)) first = await events.next();
      // No event at all in a JSON response: a whole reply, served as the stream the client asked for. The generation
      // is done and paid for; throwing it away for another deployment's would pay twice and wait twice. Its later
      // stream calls ask for the whole reply (not to stream), within the whole reply's timeout (see #wholeAsStream).
      // Only a chat completion marks the deployment: a body that is no JSON object (nothing, keep-alives alone) is a
      // drop, and one that is no completion a failure, as from a deployment that streams.
      const whole = first.done && kept !== null ? kept.bytes() : null;
      if (whole !== null && JSON_OBJECT_START.test(whole.subarray(0, 64).toString('latin1'))) {
        const completion = chatCompletionOf(parseJsonObject(whole), call.publicModel, this.#now);
        this.#notStreaming.set(id, this.#now() + NOT_STREAMING_MS);
        release();
        return new WholeReplyStream(completion, call.clientWantsUsage);
      }
      kept?.letGo();
      if (limit) limit.maxEventLength = MAX_EVENT_LENGTH;
      if (first.done || first.value === '[DONE]') {
        throw new UpstreamFailure('dropped', 'upstream stream ended before its first event');
      }
      if (isErrorEvent(first.value))
        throw new UpstreamFailure('server_error', 'upstream stream began with an error');
      // Checked here, before the deployment is committed: a first event that is no chunk is a failure another
      // deployment can make good, not a stream the client receives broken.
      const head = firstChunkData(first.value);
      return new RelayedStream(head, new UpstreamEvents(events, abort, release), call);
    });
  }

  streamMode(deployment: Deployment): StreamMode {
    const until = this.#notStreaming.get(deployment.id);
    return until === undefined ? 'stream' : until > this.#now() ? 'whole' : 'recheck';
  }

  /**
   * A stream call to a deployment that answered one with a whole reply lately: asked for the whole reply (a stream
   * request would only take the stream's shorter first-byte timeout for a whole generation), served as a stream.
   */
  async #wholeAsStream(call: UpstreamCall): Promise<ChatStream> {
    const { stream: _stream, stream_options: _options, ...body } = call.body;
    const { body: completion } = await this.complete({ ...call, body });
    return new WholeReplyStream(completion, call.clientWantsUsage);
  }

  #post(call: UpstreamCall, headersTimeoutMs: number) {
    return this.#http.post(call, {
      path: '/chat/completions',
      body: JSON.stringify(call.body),
      contentType: 'application/json',
      accept: call.body.stream === true ? 'text/event-stream' : 'application/json',
      headersTimeoutMs,
      ...(call.body.stream === true ? {} : { wholeBodyLimitBytes: MAX_REPLY_BYTES }),
    });
  }
}

/** How long a deployment that answered a stream request with a whole reply is asked for whole replies instead. */
const NOT_STREAMING_MS = 10 * 60_000;

/** Largest non-stream reply read; far above any real completion. */
const MAX_REPLY_BYTES = 64 * 1024 * 1024;

/**
 * Whether an upstream event reports a failure rather than output: OpenAI-style `{"error":…}` events, and the
 * aggregators' form (OpenRouter's), a chunk carrying a top-level `error` object and `finish_reason: "error"`. Relayed,
 * the latter would read as a reply that finished and be charged; and "error" is no finish reason OpenAI clients
 * know. Outside string values a `"error"` key is a key, so only chunks containing one are parsed.
 */
const isErrorEvent = (data: string): boolean => {
  if (data.startsWith('{"error"')) return true;
  if (!data.includes('"error"')) return false;
  if (FINISHED_IN_ERROR.test(data)) return true;
  try {
    const error = (JSON.parse(data) as { error?: unknown }).error;
    return typeof error === 'object' && error !== null;
  } catch {
    return false;
  }
};
const FINISHED_IN_ERROR = /"finish_reason"\s*:\s*"error"/;

/** Iterates the upstream events after the first, relabelled; ends at `[DONE]`, throws on anything else. */
class RelayedStream implements ChatStream {
  readonly #first: string;
  readonly #upstream: UpstreamEvents;
  readonly #modelLabel: string;
  /** The `model` field as the upstream writes it when it names the model it was asked for. */
  readonly #modelNeedle: string;
  /** The replacement, as a function: a `$` in a label must not read as a replacement pattern. */
  readonly #relabel = (): string => this.#modelLabel;
  readonly #stripNullUsage: boolean;

  /**
   * The usage-only chunk (`choices: []`) seen, or every choice finished: the reply is whole, and an end without
   * `[DONE]` after that takes nothing from it. (Not any usage: some upstreams put a running total on every chunk.)
   */
  #usageOnlySeen = false;
  #finishes = 0;
  readonly #choices: number;
  /** Whether a chunk has been relayed yet (the first may need an opening chunk before it). */
  #started = false;
  /**
   * With n > 1, the choices not seen yet: a choice's first delta may come after the stream's first chunk, and is
   * opened (if it does not open itself) when it comes. Null once every choice is open, and always with n = 1.
   */
  #unopened: Set<number> | null = null;

  constructor(first: string, upstream: UpstreamEvents, call: UpstreamCall) {
    this.#first = first;
    this.#upstream = upstream;
    this.#modelLabel = `"model":${JSON.stringify(call.publicModel)}`;
    this.#modelNeedle = `"model":${JSON.stringify(call.deployment.upstreamModel)}`;
    this.#choices = typeof call.body.n === 'number' ? call.body.n : 1;
    // We forced include_usage upstream; a client that did not ask should not see `"usage":null` either.
    this.#stripNullUsage = !call.clientWantsUsage;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ChatStreamEvent, void, undefined> {
    try {
      const head = this.#event(this.#first, true);
      if (head) yield* this.#opened(head);
      for (;;) {
        const data = await this.#upstream.next('upstream stream ended without [DONE]', this.#complete());
        if (data === null) return this.#upstream.finish();
        if (data === '[DONE]') {
          // The protocol's end before the reply's: a choice never finished and no usage came. Relayed as a
          // success it would read as whole to the client, and be billed on our count.
          if (!this.#complete())
            throw new UpstreamFailure('protocol', 'upstream sent [DONE] before every choice finished');
          return this.#upstream.finish();
        }
        // After a whole reply an error event, or an event that is no chunk, takes nothing from it, as a drop there
        // does not: the reply ends as it is ([DONE], billed), and the connection is closed, not read on.
        if (isErrorEvent(data)) {
          if (this.#complete()) return;
          throw new UpstreamFailure('server_error', 'upstream sent an error mid-stream');
        }
        let event: ChatStreamEvent | null;
        try {
          event = this.#event(data);
        } catch (error) {
          if (this.#complete()) return;
          throw error;
        }
        if (event) yield* this.#opened(event);
      }
    } finally {
      this.close();
    }
  }

  close(): void {
    this.#upstream.close();
  }

  /** `event`, preceded by the opening chunk of the choices it is the first of and does not open itself. */
  *#opened(event: ChatStreamEvent): Generator<ChatStreamEvent> {
    let opening: string | null = null;
    if (!this.#started) {
      this.#started = true;
      if (this.#choices > 1) this.#unopened = new Set(Array.from({ length: this.#choices }, (_, i) => i));
      opening = this.#unopened ? openingOfChoices(event.data, this.#unopened) : openingChunk(event.data);
    } else if (this.#unopened && !event.usageOnly) {
      opening = openingOfChoices(event.data, this.#unopened, false);
    }
    if (this.#unopened?.size === 0) this.#unopened = null;
    if (opening !== null) yield { data: opening, usage: null, usageOnly: false, output: NO_OUTPUT };
    yield event;
  }

  /** Whether the reply is whole without `[DONE]`: its usage-only chunk arrived, or every choice finished. */
  #complete(): boolean {
    return this.#usageOnlySeen || this.#finishes >= this.#choices;
  }

  /** The event to relay, or null for one that adds nothing (an empty keep-alive object, a usage-only chunk again). */
  #event(raw: string, checked = false): ChatStreamEvent | null {
    let data = checked ? raw : chunkData(raw);
    // `data: {}` keeps some upstreams' connections alive; relayed, it is a chunk with no `choices` for the client's
    // SDK to index.
    if (data === '{}') return null;
    // Whatever model the upstream names — OpenAI answers `gpt-4o-mini` as `gpt-4o-mini-2024-07-18`, not the name it
    // was asked for — the client sees the public id, as in a non-stream reply. Unescaped, `"model":"` is a key.
    // The name it was asked for is the common case, replaced as plain text; any other takes the pattern.
    const asked = data.indexOf(this.#modelNeedle);
    data =
      asked !== -1
        ? data.slice(0, asked) + this.#modelLabel + data.slice(asked + this.#modelNeedle.length)
        : data.replace(MODEL_FIELD, this.#relabel);
    // A finish is a non-empty reason: some upstreams write `""` rather than null on the chunks before it.
    this.#finishes += countNonEmpty(data, '"finish_reason":"');
    const usageAt = data.lastIndexOf('"usage":');
    if (usageAt !== -1 && data.charCodeAt(usageAt + 8) === 123 /* { */) {
      const chunk = JSON.parse(data) as { choices?: unknown[]; usage?: unknown };
      // The chunk's own usage, not one nested elsewhere (Groq's `x_groq.usage` on its finish chunk).
      if (typeof chunk.usage === 'object' && chunk.usage !== null) {
        const usageOnly = !Array.isArray(chunk.choices) || chunk.choices.length === 0;
        // One usage-only chunk per stream, as OpenAI sends: one an upstream repeats is not repeated to the client.
        if (usageOnly && this.#usageOnlySeen) return null;
        if (usageOnly) this.#usageOnlySeen = true;
        const usage = parseOpenAiUsage(chunk.usage);
        if (usage === null) {
          // A report nothing can be billed on (no completion count, say): not passed on — a client that asked for
          // usage gets the one the stream is billed on (our count) at its end, and one that did not, none.
          if (usageOnly) return null;
          delete chunk.usage;
          const stripped = JSON.stringify(chunk);
          return { data: stripped, usage: null, usageOnly: false, output: outputOf(stripped) };
        }
        return { data, usage, usageOnly, output: usageOnly ? NO_OUTPUT : outputOf(data) };
      }
    }
    if (this.#stripNullUsage && usageAt !== -1) data = data.replace(',"usage":null', '');
    return { data, usage: null, usageOnly: false, output: outputOf(data) };
  }
}

/**
 * The chunk a stream must open with when its upstream's first one is not that chunk, else null. Spec §4 rule 3: the
 * first chunk's delta carries the role and no content. OpenAI and most upstreams open so; some put the role and the
 * first text in one chunk, or never send a role, and a client that builds the reply from the first chunk's role
 * (or checks the first chunk) would then see none. OpenAI's own opening of a tool-call reply — role, `content:
 * null` and the call's name — has no text either, and stays as it is. The chunk made here is OpenAI's opening:
 * the first chunk's id, creation time and model, the role and empty content for each of its choices (choice 0, when
 * it has none). For a stream of one choice; with n > 1 each choice is opened as it comes (`openingOfChoices`).
 */
export const openingChunk = (data: string): string | null => {
  // OpenAI's own opening, without a parse: that delta whole (nothing else in it but a null refusal), and the only one.
  const at = data.indexOf(OPENING_DELTA);
  if (at !== -1 && data.indexOf('"delta":', at + 1) === -1) {
    const rest = at + OPENING_DELTA.length;
    if (data.startsWith('}', rest) || data.startsWith(',"refusal":null}', rest)) return null;
  }
  const chunk = JSON.parse(data) as Record<string, unknown>;
  const list = Array.isArray(chunk.choices) ? (chunk.choices as unknown[]) : [];
  if (list.length > 0 && list.every(opensChoice)) return null;
  const indices = [...new Set(list.map((c) => (c as { index?: unknown } | null)?.index))].filter(
    (i): i is number => typeof i === 'number',
  );
  return openingOf(chunk, indices);
};

/**
 * With n > 1 (OpenAI opens each choice with its own chunk): the opening of the choices in `unopened` that this chunk
 * is the first to carry and that do not open themselves, else null. Every choice the chunk carries leaves
 * `unopened`. A first chunk that carries no choice at all (a usage report first) opens them all.
 */
export const openingOfChoices = (data: string, unopened: Set<number>, first = true): string | null => {
  const chunk = JSON.parse(data) as Record<string, unknown>;
  const list = Array.isArray(chunk.choices) ? (chunk.choices as unknown[]) : [];
  if (list.length === 0) {
    if (!first) return null;
    const all = [...unopened];
    unopened.clear();
    return openingOf(chunk, all);
  }
  const indices: number[] = [];
  for (const choice of list) {
    const index = (choice as { index?: unknown } | null)?.index;
    if (typeof index !== 'number' || !unopened.has(index)) continue;
    unopened.delete(index);
    if (!opensChoice(choice)) indices.push(index);
  }
  return indices.length > 0 ? openingOf(chunk, indices) : null;
};

/** OpenAI's opening chunk for `indices`, with `chunk`'s id, creation time, model and fingerprint. */
const openingOf = (chunk: Record<string, unknown>, indices: readonly number[]): string =>
  JSON.stringify({
    id: chunk.id,
    object: 'chat.completion.chunk',
    created: chunk.created,
    model: chunk.model,
    ...(typeof chunk.system_fingerprint === 'string' ? { system_fingerprint: chunk.system_fingerprint } : {}),
    choices: (indices.length > 0 ? indices : [0]).map((index) => ({
      index,
      delta: { role: 'assistant', content: '' },
      logprobs: null,
      finish_reason: null,
    })),
  });

const OPENING_DELTA = '"delta":{"role":"assistant","content":""';

/** Whether a choice of a first chunk opens it: a role, and no text (a tool call's name may come with it). */
const opensChoice = (choice: unknown): boolean => {
  const delta = (choice as { delta?: unknown } | null)?.delta as Record<string, unknown> | null | undefined;
  if (typeof delta !== 'object' || delta === null || typeof delta.role !== 'string') return false;
  return ['content', 'refusal', 'reasoning_content', 'reasoning'].every(
    (field) => delta[field] === undefined || delta[field] === null || delta[field] === '',
  );
};

/** A chunk's `model` field, whatever its value (the first is the chunk's own: OpenAI writes it first). */
const MODEL_FIELD = /"model":"(?:[^"\\]|\\.)*"/;

/**
 * An event's data as one compact line, and a JSON object — what a chunk is; anything else would reach the client's
 * SDK as a line it cannot parse. Compact JSON on one line is what nearly every upstream sends, taken as it is after
 * a look at its ends (the fast path does not parse chunks); anything else — spaces after colons (Python's
 * json.dumps), an event over several `data:` lines, spaces around it — is re-serialised, so the model is
 * relabelled, the usage found and the data framed on one line all the same.
 */
const chunkData = (raw: string): string => {
  const plain = !raw.includes('\n') && !raw.includes('": ') && !raw.includes('" :');
  if (plain && raw.charCodeAt(0) === 123 /* { */ && raw.charCodeAt(raw.length - 1) === 125 /* } */)
    return raw;
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw new UpstreamFailure('protocol', 'upstream sent an event that is not JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new UpstreamFailure('protocol', 'upstream sent an event that is not a JSON object');
  return JSON.stringify(value);
};

const EMPTY_OBJECT = /^\s*\{\s*\}\s*$/;

/** How a body that is a JSON object begins (whitespace, then a brace): an event stream begins otherwise. */
const JSON_OBJECT_START = /^\s*\{/;

/**
 * The first event's data, parsed whole (once a stream: the relay's fast path only looks at an event's ends): a JSON
 * object with `choices` or a usage report — a chunk. Anything else commits the call to a deployment that sends no reply.
 */
const firstChunkData = (raw: string): string => {
  const data = chunkData(raw);
  let chunk: { choices?: unknown; usage?: unknown };
  try {
    chunk = JSON.parse(data) as typeof chunk;
  } catch {
    throw new UpstreamFailure('protocol', 'upstream sent a first event that is not JSON');
  }
  if (!Array.isArray(chunk.choices) && (typeof chunk.usage !== 'object' || chunk.usage === null))
    throw new UpstreamFailure('protocol', 'upstream sent a first event that is not a chat completion chunk');
  return data;
};

/** Occurrences of `needle` (a field and its opening quote) whose string is not empty. */
const countNonEmpty = (text: string, needle: string): number => {
  let count = 0;
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length))
    if (text.charCodeAt(at + needle.length) !== 34 /* " */) count++;
  return count;
};

const NO_OUTPUT: readonly string[] = [];

/**
 * The fields whose strings are completion output: text, shown reasoning, a refusal, a tool call's pieces. Shown
 * reasoning comes as `reasoning_content` or as `reasoning` — some servers send the same text under both names (one
 * an alias of the other), so where a delta has the first, the second is not counted again.
 */
const OUTPUT_FIELDS = ['"content":"', '"refusal":"', '"arguments":"', '"name":"'];
const REASONING = '"reasoning_content":"';
const REASONING_ALIAS = '"reasoning":"';
const DELTA = '"delta":{';

/**
 * The completion output a chunk carries, for our count when the stream must be billed from an estimate: each
 * non-empty output string of its choices' deltas, as written — found without a parse, as the rest of this relay
 * works (inside a JSON string every quote is escaped, so neither a field's opening nor a delta's can appear there).
 * Only deltas: some upstreams add the whole message so far beside each delta (Perplexity's `message`), which is not
 * new output. The opening chunk's empty `"content":""` is not output.
 */
export const outputOf = (data: string): readonly string[] => {
  let output: string[] | null = null;
  for (let at = data.indexOf(DELTA); at !== -1; at = data.indexOf(DELTA, at + DELTA.length)) {
    const open = at + DELTA.length - 1;
    const close = objectEnd(data, open);
    const before = output?.length ?? 0;
    output = piecesOf(data, REASONING, open, close, output);
    if ((output?.length ?? 0) === before) output = piecesOf(data, REASONING_ALIAS, open, close, output);
    for (const field of OUTPUT_FIELDS) output = piecesOf(data, field, open, close, output);
  }
  return output ?? NO_OUTPUT;
};

/** Adds to `output` the non-empty strings of `field` between `from` and `to`. */
const piecesOf = (
  data: string,
  field: string,
  from: number,
  to: number,
  output: string[] | null,
): string[] | null => {
  for (
    let at = data.indexOf(field, from);
    at !== -1 && at < to;
    at = data.indexOf(field, at + field.length)
  ) {
    const start = at + field.length;
    const end = stringEnd(data, start);
    if (end === start) continue;
    output ??= [];
    output.push(data.slice(start, end));
  }
  return output;
};

/** Where the JSON object that opens at `open` ends (past its closing brace), strings skipped. */
const objectEnd = (data: string, open: number): number => {
  let depth = 0;
  for (let at = open; at < data.length; at++) {
    const code = data.charCodeAt(at);
    if (code === 34 /* " */) at = stringEnd(data, at + 1);
    else if (code === 123 /* { */) depth++;
    else if (code === 125 /* } */ && --depth === 0) return at + 1;
  }
  return data.length;
};

/** Where the JSON string whose contents begin at `start` ends: its closing quote (not an escaped one). */
const stringEnd = (data: string, start: number): number => {
  for (let at = data.indexOf('"', start); at !== -1; at = data.indexOf('"', at + 1)) {
    let backslashes = 0;
    while (data.charCodeAt(at - 1 - backslashes) === 92 /* \\ */) backslashes++;
    if (backslashes % 2 === 0) return at;
  }
  return data.length;
};
