import { countTokens } from 'gpt-tokenizer';
import type { TokenCounter } from '#core/ports.ts';

/** User text may contain special-token spellings (`<|endoftext|>`); they count as plain text, never throw. */
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/**
 * The o200k_base BPE tokenizer (pure JS, loaded once per cold start). Upstream models tokenize
 * differently; these counts size estimates (holds, limit charges, context checks), never the bill
 * when the upstream reports usage.
 */
export const o200kTokenCounter: TokenCounter = {
  count: (text: string) => (text.length === 0 ? 0 : countTokens(text, PLAIN_TEXT)),
};
