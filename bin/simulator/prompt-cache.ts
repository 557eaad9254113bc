/**
 * Simulated prompt caching: remembers recently seen prompts so a repeated long prompt reports cached
 * tokens, as OpenAI does for prompts of 1024 tokens or more (in 128-token increments).
 */
import { createHash } from 'node:crypto';

/** Prompts shorter than this are never reported as cached. */
export const MIN_CACHEABLE_PROMPT_TOKENS = 1024;
/** Cached token counts are whole multiples of this. */
export const CACHE_INCREMENT_TOKENS = 128;
/** Default number of distinct prompts remembered. */
export const DEFAULT_PROMPT_CACHE_ENTRIES = 1000;

/** Cached tokens reported for a prompt of `promptTokens` that was seen before. */
export function cachedTokensFor(promptTokens: number): number {
  if (promptTokens < MIN_CACHEABLE_PROMPT_TOKENS) return 0;
  return Math.floor(promptTokens / CACHE_INCREMENT_TOKENS) * CACHE_INCREMENT_TOKENS;
}

/** LRU set of prompt fingerprints, keyed per model. */
export class PromptCache {
  readonly #capacity: number;
  // A Map iterates in insertion order, so re-inserting on every hit makes its first key the LRU entry.
  readonly #entries = new Map<string, true>();

  constructor(capacity: number = DEFAULT_PROMPT_CACHE_ENTRIES) {
    this.#capacity = capacity;
  }

  /** Records the prompt and reports whether the same model had already seen it. */
  remember(model: string, prompt: string): boolean {
    const key = createHash('sha256').update(model).update('\0').update(prompt).digest('base64');
    const seen = this.#entries.delete(key);
    this.#entries.set(key, true);
    if (this.#entries.size > this.#capacity) {
      const oldest = this.#entries.keys().next();
      if (!oldest.done) this.#entries.delete(oldest.value);
    }
    return seen;
  }
}
