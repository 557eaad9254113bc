import { UpstreamFailure } from '#core/fallback.ts';
import type {
  ChatCompletionResult,
  ChatProvider,
  ChatStream,
  ChatStreamEvent,
  UpstreamCall,
} from '#core/upstream.ts';
import type { Usage } from '#core/usage.ts';
import {
  ANTHROPIC_VERSION,
  anthropicStatusFailure,
  fromMessagesResponse,
  MessagesStreamTranslator,
  toMessagesRequest,
} from './anthropic-translate.ts';
import { readErrorBody, retryAfterMs, type UpstreamResponse } from './http.ts';
import { type AuthHeaders, type OpenAiHttp, openWithinFirstByte, readJsonObject } from './openai-http.ts';
import { sseData, UpstreamEvents } from './sse.ts';

/** Anthropic's scheme: `x-api-key`, and the API version on every request (even keyless ones, via a proxy). */
const VERSION_ONLY: Readonly<Record<string, string>> = Object.freeze({
  'anthropic-version': ANTHROPIC_VERSION,
});

/** Anthropic's scheme: `x-api-key`, and the API version on every request (even keyless ones, via a proxy). */
export const anthropicAuth: AuthHeaders = (key) =>
  key === null ? VERSION_ONLY : { 'x-api-key': key, 'anthropic-version': ANTHROPIC_VERSION };

/** A whole Messages reply is text plus tool calls; anything this large is not one. */
const MAX_REPLY_BYTES = 64 * 1024 * 1024;

const nowSeconds = (): number => Math.floor(Date.now() / 1000);

/**
 * Adapter for Anthropic's Messages API (`POST <baseUrl>/messages`, base URL ending in `/v1`). Requests,
 * replies and stream events are translated by anthropic-translate.ts; the request side (keys, timeouts,
 * pooled connections) is the shared `OpenAiHttp`, built with `anthropicAuth` headers.
 * Failures before the first event are `UpstreamFailure`s exactly as for openai-compatible deployments, so
 * fallback, key cycling and health treat both alike.
 */
export class AnthropicChat implements ChatProvider {
  readonly #http: OpenAiHttp;

  constructor(http: OpenAiHttp) {
    this.#http = http;
  }

  async complete(call: UpstreamCall): Promise<ChatCompletionResult> {
    const body = toMessagesRequest(call.body);
    const response = await this.#post(call, body, this.#http.completionTimeoutMs(call.deployment));
    if (response.statusCode !== 200) throw await statusFailure(response);
    const message = await readJsonObject(response, MAX_REPLY_BYTES);
    return fromMessagesResponse(message, { publicModel: call.publicModel, created: nowSeconds() });
  }

  stream(call: UpstreamCall): Promise<ChatStream> {
    const body = toMessagesRequest(call.body);
    const firstByteMs = this.#http.firstByteTimeoutMs(call.deployment);
    return openWithinFirstByte(call, firstByteMs, 'first event', async (abort, release) => {
      const response = await this.#post({ ...call, signal: abort.signal }, body, firstByteMs);
      if (response.statusCode !== 200) throw await statusFailure(response);
      const translator = new MessagesStreamTranslator({
        publicModel: call.publicModel,
        created: nowSeconds(),
        clientWantsUsage: call.clientWantsUsage,
      });
      const events = sseData(response.body);
      // Upstream events that yield no chunk do not commit the deployment: `message_start` and pings, since the
      // translator holds the role chunk until the first content event. An `error` event before then (Anthropic
      // reports overloads in-stream too, after message_start) is thrown here and falls back like a status, and the
      // first-byte timeout runs until the first chunk.
      let first: ChatStreamEvent[] = [];
      while (first.length === 0) {
        const next = await events.next();
        if (next.done || translator.finished) {
          throw new UpstreamFailure('dropped', 'upstream stream ended before its first event');
        }
        first = translator.translate(next.value);
      }
      return new TranslatedStream(first, new UpstreamEvents(events, abort, release), translator);
    });
  }

  #post(call: UpstreamCall, body: Record<string, unknown>, headersTimeoutMs: number) {
    return this.#http.post(call, {
      path: '/messages',
      body: JSON.stringify(body),
      contentType: 'application/json',
      accept: body.stream === true ? 'text/event-stream' : 'application/json',
      headersTimeoutMs,
      ...(body.stream === true ? {} : { wholeBodyLimitBytes: MAX_REPLY_BYTES }),
    });
  }
}

const statusFailure = async (response: UpstreamResponse): Promise<UpstreamFailure> =>
  anthropicStatusFailure(response.statusCode, await readErrorBody(response), retryAfterMs(response.headers));

/** Iterates the translated events; ends after `message_stop`, throws on an `error` event or a cut-off. */
class TranslatedStream implements ChatStream {
  readonly #first: ChatStreamEvent[];
  readonly #upstream: UpstreamEvents;
  readonly #translator: MessagesStreamTranslator;

  constructor(first: ChatStreamEvent[], upstream: UpstreamEvents, translator: MessagesStreamTranslator) {
    this.#first = first;
    this.#upstream = upstream;
    this.#translator = translator;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ChatStreamEvent, void, undefined> {
    try {
      yield* this.#first;
      while (!this.#translator.finished) {
        const data = await this.#upstream.next(
          'upstream stream ended without message_stop',
          this.#translator.replied,
        );
        // Cut after the reply was whole (as the OpenAI-compatible relay treats a drop after every choice finished),
        // or an error event or garbage there: ended as `message_stop` would have ended it, and billed on the counts
        // `message_delta` gave.
        yield* data === null ? this.#translator.stop() : this.#translatedOrStopped(data);
      }
      this.#upstream.finish();
    } finally {
      this.close();
    }
  }

  promptUsage(): Pick<Usage, 'promptTokens' | 'cachedPromptTokens'> | null {
    return this.#translator.promptUsage;
  }

  close(): void {
    this.#upstream.close();
  }

  #translatedOrStopped(data: string): ChatStreamEvent[] {
    try {
      return this.#translator.translate(data);
    } catch (error) {
      if (!this.#translator.replied) throw error;
      return this.#translator.stop();
    }
  }
}
