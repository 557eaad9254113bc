import type { Deployment } from './registry.ts';
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
  /** Text deltas in this chunk, counted only if the stream has to be billed from an estimate. */
  readonly contentChunks: number;
}

/**
 * A stream whose first event has already arrived (so the deployment is committed). Iteration ends after
 * the upstream's `[DONE]`; a failure after the first event is thrown from the iterator.
 */
export interface ChatStream extends AsyncIterable<ChatStreamEvent> {
  close(): void;
}

export interface ChatProvider {
  complete(call: UpstreamCall): Promise<ChatCompletionResult>;
  /** Resolves once the first event has arrived; throws `UpstreamFailure` if it never does. */
  stream(call: UpstreamCall): Promise<ChatStream>;
}
