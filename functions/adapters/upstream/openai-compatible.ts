import { UpstreamFailure } from '#core/fallback.ts';
import type {
  ChatCompletionResult,
  ChatProvider,
  ChatStream,
  ChatStreamEvent,
  UpstreamCall,
} from '#core/upstream.ts';
import { parseOpenAiUsage } from '#core/usage.ts';
import { statusFailure } from './http.ts';
import { type OpenAiHttp, openWithinFirstByte, readJsonObject } from './openai-http.ts';
import { sseData, UpstreamEvents } from './sse.ts';

/**
 * Adapter for OpenAI-compatible chat completions (OpenAI, Groq, Together, Fireworks, DeepInfra, Mistral,
 * vLLM, Ollama, …): the wire format is already ours, so requests pass through and stream events are
 * relayed as text. Per event we only relabel the model and look for the usage chunk; JSON is parsed
 * only for the chunk that carries usage.
 */
export class OpenAiCompatibleChat implements ChatProvider {
  readonly #http: OpenAiHttp;

  constructor(http: OpenAiHttp) {
    this.#http = http;
  }

  async complete(call: UpstreamCall): Promise<ChatCompletionResult> {
    const response = await this.#post(call, this.#http.completionTimeoutMs(call.deployment));
    if (response.statusCode !== 200) throw await statusFailure(response);
    const body = await readJsonObject(response, MAX_REPLY_BYTES);
    if (!Array.isArray(body.choices))
      throw new UpstreamFailure('protocol', 'upstream body is not a chat completion');
    body.model = call.publicModel;
    return { body, usage: parseOpenAiUsage(body.usage) };
  }

  stream(call: UpstreamCall): Promise<ChatStream> {
    const firstByteMs = this.#http.firstByteTimeoutMs(call.deployment);
    return openWithinFirstByte(call, firstByteMs, 'first event', async (abort, release) => {
      const response = await this.#post({ ...call, signal: abort.signal }, firstByteMs);
      if (response.statusCode !== 200) throw await statusFailure(response);
      const events = sseData(response.body);
      const first = await events.next();
      if (first.done || first.value === '[DONE]') {
        throw new UpstreamFailure('dropped', 'upstream stream ended before its first event');
      }
      if (isErrorEvent(first.value))
        throw new UpstreamFailure('server_error', 'upstream stream began with an error');
      return new RelayedStream(first.value, new UpstreamEvents(events, abort, release), call);
    });
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

/** Largest non-stream reply read; far above any real completion. */
const MAX_REPLY_BYTES = 64 * 1024 * 1024;

const isErrorEvent = (data: string): boolean => data.startsWith('{"error"');

/** Iterates the upstream events after the first, relabelled; ends at `[DONE]`, throws on anything else. */
class RelayedStream implements ChatStream {
  readonly #first: string;
  readonly #upstream: UpstreamEvents;
  readonly #modelNeedle: string;
  readonly #modelLabel: string;
  readonly #stripNullUsage: boolean;

  constructor(first: string, upstream: UpstreamEvents, call: UpstreamCall) {
    this.#first = first;
    this.#upstream = upstream;
    this.#modelNeedle = `"model":${JSON.stringify(call.deployment.upstreamModel)}`;
    this.#modelLabel = `"model":${JSON.stringify(call.publicModel)}`;
    // We forced include_usage upstream; a client that did not ask should not see `"usage":null` either.
    this.#stripNullUsage = !call.clientWantsUsage;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ChatStreamEvent, void, undefined> {
    try {
      yield this.#event(this.#first);
      for (;;) {
        const data = await this.#upstream.next('upstream stream ended without [DONE]');
        if (data === '[DONE]') return this.#upstream.finish();
        if (isErrorEvent(data))
          throw new UpstreamFailure('server_error', 'upstream sent an error mid-stream');
        yield this.#event(data);
      }
    } finally {
      this.close();
    }
  }

  close(): void {
    this.#upstream.close();
  }

  #event(raw: string): ChatStreamEvent {
    let data = raw.replace(this.#modelNeedle, this.#modelLabel);
    const usageAt = data.lastIndexOf('"usage":');
    if (usageAt !== -1 && data.charCodeAt(skipSpaces(data, usageAt + 8)) === 123 /* { */) {
      const chunk = JSON.parse(data) as { choices?: unknown[]; usage?: unknown };
      return {
        data,
        usage: parseOpenAiUsage(chunk.usage),
        usageOnly: !Array.isArray(chunk.choices) || chunk.choices.length === 0,
        contentChunks: 0,
      };
    }
    if (this.#stripNullUsage && usageAt !== -1) data = data.replace(',"usage":null', '');
    return { data, usage: null, usageOnly: false, contentChunks: data.includes('"content":"') ? 1 : 0 };
  }
}

const skipSpaces = (text: string, from: number): number => {
  let i = from;
  while (text.charCodeAt(i) === 32) i++;
  return i;
};
