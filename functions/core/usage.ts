import type { Outcome } from './settlement.ts';

/** What one call consumed, in the units its model is billed in. */
export interface Usage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** Prompt tokens the upstream served from its prompt cache (billed at the cached rate). */
  readonly cachedPromptTokens: number;
  /** Reasoning tokens, already included in `completionTokens`. */
  readonly reasoningTokens: number;
  /** Transcription: audio duration measured by the gateway. */
  readonly audioMs?: number;
  /** Speech: characters of `input` and `instructions` (core/audio.ts speechCharacters). */
  readonly characters?: number;
  /**
   * `upstream`: the provider's own usage report. `estimated`: counted by the gateway because the
   * provider sent none or the stream ended early. `measured`: taken from the request itself (audio, text).
   */
  readonly source: 'upstream' | 'estimated' | 'measured';
}

export const tokensOf = (usage: Usage): number => usage.promptTokens + usage.completionTokens;

/** Whether a call that ended this way is paid for: the client got (or walked away from) what it asked for. */
export const isCharged = (outcome: Outcome): boolean => outcome === 'success' || outcome === 'client_aborted';

const count = (value: unknown): number | null =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : null;

const nested = (value: unknown, key: string): unknown =>
  value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined;

/**
 * The OpenAI `usage` object of a chat call, for responses whose upstream reported none (or none we could read):
 * the client sees the counts it is billed on.
 */
export const openAiChatUsage = (usage: Usage) => ({
  prompt_tokens: usage.promptTokens,
  completion_tokens: usage.completionTokens,
  total_tokens: usage.promptTokens + usage.completionTokens,
  prompt_tokens_details: { cached_tokens: usage.cachedPromptTokens },
  completion_tokens_details: { reasoning_tokens: usage.reasoningTokens },
});

/**
 * An upstream's usage with its completion held to what the call allowed (`limit`: the completion cap sent, times
 * the choices asked for). A model cannot write more than its cap, so a report above it is a provider's error —
 * and billing it would debit far past the hold the cap sized (a probe's fake upstream reported 5 M tokens for a
 * 16-token cap: 4 USD against a 0.00008 USD hold). The same object when nothing is above the limit.
 */
export const withinCompletionLimit = (usage: Usage, limit: number): Usage =>
  usage.completionTokens <= limit
    ? usage
    : { ...usage, completionTokens: limit, reasoningTokens: Math.min(usage.reasoningTokens, limit) };

/**
 * Reads an OpenAI-style `usage` object. Returns null when it is absent or malformed, so the caller
 * falls back to its own estimate instead of billing garbage.
 */
export const parseOpenAiUsage = (raw: unknown): Usage | null => {
  const prompt = count(nested(raw, 'prompt_tokens'));
  // A chat report without its completion count is malformed, not a reply of no tokens: billed on our count.
  const completion = count(nested(raw, 'completion_tokens'));
  if (prompt === null || completion === null) return null;
  const cached = count(nested(nested(raw, 'prompt_tokens_details'), 'cached_tokens')) ?? 0;
  const reasoning = count(nested(nested(raw, 'completion_tokens_details'), 'reasoning_tokens')) ?? 0;
  return {
    promptTokens: prompt,
    completionTokens: completion,
    cachedPromptTokens: Math.min(cached, prompt),
    reasoningTokens: Math.min(reasoning, completion),
    source: 'upstream',
  };
};
