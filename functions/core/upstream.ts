import type { Deployment, Rates } from './registry.ts';
import type { Usage } from './usage.ts';

/**
 * The contract every provider adapter implements (openai-compatible, anthropic, …). Adapters translate
 * to and from the chat-completions wire format; core never sees a provider's own format.
 * Before anything is committed to the client an adapter reports failure by throwing `UpstreamFailure`
 * (core/fallback.ts), which lets core fall back to another deployment.
 */
export interface UpstreamCall {
  readonly deployment: Deployment;
  /** Which of the deployment's keys to use (chosen by core/fallback.ts). */
  readonly keyIndex: number;
  /** Chat-completions body for this deployment (core/chat.ts `upstreamChatBody`). */
  readonly body: Record<string, unknown>;
  /** The model id the client asked for; responses are relabelled with it. */
  readonly publicModel: string;
  /** Whether stream chunks should keep `usage` fields (the client asked for `include_usage`). */
  readonly clientWantsUsage: boolean;
  readonly signal?: AbortSignal;
}

export interface ChatCompletionResult {
  /** The chat.completion object, relabelled with the public model id. */
  readonly body: Record<string, unknown>;
  readonly usage: Usage | null;
}

export interface ChatStreamEvent {
  /** The chunk's JSON text, ready to frame as `data: …`. */
  readonly data: string;
  /** Set on the chunk that carries the upstream's usage report. */
  readonly usage: Usage | null;
  /** The usage-only final chunk (`choices: []`), which a client that did not ask for usage must not see. */
  readonly usageOnly: boolean;
  /**
   * The completion output this chunk carries — text, visible reasoning, tool-call names and argument pieces — as
   * JSON string contents (escapes as written), one entry per field; counted only if the stream has to be billed
   * from an estimate (no usage report, a client gone, the call's deadline).
   */
  readonly output: readonly string[];
}

/**
 * A stream whose first event has already arrived (so the deployment is committed). Iteration ends after
 * the upstream's `[DONE]`; a failure after the first event is thrown from the iterator.
 */
export interface ChatStream extends AsyncIterable<ChatStreamEvent> {
  close(): void;
  /**
   * True when its events were made from a whole reply (an upstream that does not stream): the first came with the
   * reply's end, so the time to it is the generation's, which the client's request decides, not the deployment's
   * latency.
   */
  readonly whole?: boolean;
  /**
   * The prompt side of the usage an upstream reported as its stream began, before its final report (Anthropic's
   * `message_start`): what a stream cut before that report is billed on for its prompt, in place of our estimate.
   * Null, or absent, where none came.
   */
  promptUsage?(): Pick<Usage, 'promptTokens' | 'cachedPromptTokens'> | null;
}

/** How a stream call to a deployment is made (ChatProvider.streamMode). */
export type StreamMode = 'stream' | 'whole' | 'recheck';

export interface ChatProvider {
  complete(call: UpstreamCall): Promise<ChatCompletionResult>;
  /** Resolves once the first event has arrived; throws `UpstreamFailure` if it never does. */
  stream(call: UpstreamCall): Promise<ChatStream>;
  /**
   * How a stream call to this deployment is made now (none: always `stream`). `whole`: its upstream was seen not to
   * stream, so the call asks for the whole reply — a stream is routed to it after the deployments that stream.
   * `recheck`: seen so a while ago, it is asked to stream again, but may answer whole. Either way the attempt's time
   * is the generation's, not a first byte's.
   */
  streamMode?(deployment: Deployment): StreamMode;
}

/** Which deployment and key an attempt uses; shared by every endpoint's upstream call. */
export interface UpstreamTarget {
  readonly deployment: Deployment;
  readonly keyIndex: number;
  readonly signal?: AbortSignal;
}

/** An embeddings vector as the upstream sent it: floats, or base64 of little-endian float32. */
export type UpstreamVector = readonly number[] | string;

export interface EmbeddingsCall extends UpstreamTarget {
  /** OpenAI embeddings body for this deployment (core/embeddings.ts `upstreamEmbeddingsBody`). */
  readonly body: Record<string, unknown>;
  /** The most the reply may be (core/embeddings.ts `embeddingsReplyLimitBytes`): more is a protocol fault. */
  readonly maxReplyBytes: number;
}

export interface EmbeddingsResult {
  /** One vector per input, in input order. */
  readonly vectors: readonly UpstreamVector[];
  /** Input tokens the upstream reported, or null when it reported none. */
  readonly promptTokens: number | null;
}

export interface EmbeddingsProvider {
  embed(call: EmbeddingsCall): Promise<EmbeddingsResult>;
}

/** An uploaded audio file, as received from the client. */
export interface AudioFile {
  readonly bytes: Uint8Array;
  readonly filename: string;
  readonly contentType: string;
}

export interface TranscriptionCall extends UpstreamTarget {
  readonly file: AudioFile;
  /** Form fields for the upstream besides `file` (model already replaced by the upstream model name). */
  readonly fields: readonly (readonly [name: string, value: string])[];
}

export interface TranscriptionResult {
  /** The upstream's response body, in the requested `response_format`. */
  readonly body: Buffer;
}

export interface TranscriptionProvider {
  transcribe(call: TranscriptionCall): Promise<TranscriptionResult>;
}

export interface SpeechCall extends UpstreamTarget {
  /** OpenAI speech body for this deployment. */
  readonly body: Record<string, unknown>;
}

/**
 * Audio bytes whose first chunk has already arrived (so the deployment is committed). Iteration ends when the
 * upstream response ends; a failure after the first chunk is thrown from the iterator.
 */
export interface AudioStream extends AsyncIterable<Uint8Array> {
  close(): void;
}

export interface SpeechProvider {
  /** Resolves once the first audio bytes have arrived; throws `UpstreamFailure` if they never do. */
  speak(call: SpeechCall): Promise<AudioStream>;
}

/**
 * A provider's price list, for the price floor: upstream model name → its cost to us (USD, the units of
 * `Rates`). Models the provider does not price are absent; `null` means the provider publishes no prices.
 */
export interface PriceSource {
  prices(target: UpstreamTarget): Promise<ReadonlyMap<string, Rates> | null>;
}

/** What one provider protocol can serve; a missing capability makes its deployments fail over. */
export interface ProviderAdapter {
  readonly chat?: ChatProvider;
  readonly embeddings?: EmbeddingsProvider;
  readonly transcriptions?: TranscriptionProvider;
  readonly speech?: SpeechProvider;
  readonly prices?: PriceSource;
}
