import { describe, expect, it } from 'vitest';
import { parseOpenAiUsage } from '#core/usage.ts';

describe('parseOpenAiUsage', () => {
  it('reads prompt, completion, cached and reasoning tokens', () => {
    expect(
      parseOpenAiUsage({
        prompt_tokens: 2048,
        completion_tokens: 40,
        total_tokens: 2088,
        prompt_tokens_details: { cached_tokens: 1024 },
        completion_tokens_details: { reasoning_tokens: 16 },
      }),
    ).toEqual({
      promptTokens: 2048,
      completionTokens: 40,
      cachedPromptTokens: 1024,
      reasoningTokens: 16,
      source: 'upstream',
    });
  });

  it('returns null for absent or malformed usage, so the caller estimates instead', () => {
    expect(parseOpenAiUsage(undefined)).toBeNull();
    expect(parseOpenAiUsage(null)).toBeNull();
    expect(parseOpenAiUsage({ prompt_tokens: -1 })).toBeNull();
    expect(parseOpenAiUsage({ prompt_tokens: '5' })).toBeNull();
    // Without its completion count a report would bill the prompt alone, whatever the reply was.
    expect(parseOpenAiUsage({ prompt_tokens: 5 })).toBeNull();
    expect(parseOpenAiUsage({ prompt_tokens: 5, completion_tokens: null, total_tokens: 5 })).toBeNull();
  });

  it('never lets cached exceed prompt tokens', () => {
    expect(
      parseOpenAiUsage({
        prompt_tokens: 10,
        completion_tokens: 1,
        prompt_tokens_details: { cached_tokens: 99 },
      })?.cachedPromptTokens,
    ).toBe(10);
  });
});
