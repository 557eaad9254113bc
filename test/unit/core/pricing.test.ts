import { describe, expect, it } from 'vitest';
import { costOf, parseUsd, usdToNano } from '#core/pricing.ts';
import type { Usage } from '#core/usage.ts';
import { chatModel } from '#test/fixtures.ts';

const usage = (overrides: Partial<Usage>): Usage => ({
  promptTokens: 0,
  completionTokens: 0,
  cachedPromptTokens: 0,
  reasoningTokens: 0,
  source: 'upstream',
  ...overrides,
});

describe('costOf', () => {
  it('prices tokens exactly at the published per-1M rates', () => {
    const famC = chatModel({ rates: { input: 3.85, output: 19.25 } });
    // 1M prompt tokens at 3.85 + 1M completion tokens at 19.25
    expect(costOf(famC, usage({ promptTokens: 1_000_000, completionTokens: 1_000_000 }))).toBe(
      usdToNano(23.1),
    );
    // 7 × 0.3 USD/1M = 2.1 µUSD = 2100 nUSD exactly (no float drift)
    expect(costOf(chatModel({ rates: { input: 0.3, output: 0 } }), usage({ promptTokens: 7 }))).toBe(2100);
  });

  it('bills cached prompt tokens at the cached rate', () => {
    const famF = chatModel({
      rates: { input: 0.4, output: 0.4, cachedInput: 0.1 },
      flags: { promptCaching: true },
    });
    // 0.4 USD/1M = 400 nUSD per token; cached 0.1 USD/1M = 100 nUSD per token
    expect(costOf(famF, usage({ promptTokens: 2000, cachedPromptTokens: 1000, completionTokens: 10 }))).toBe(
      1000 * 400 + 1000 * 100 + 10 * 400,
    );
  });

  it('rounds half up to the nano-dollar, once per call', () => {
    // 0.0375 USD/1M = 37.5 nUSD per token: one token → 38, two → 75, three → 112.5 → 113
    const cheap = chatModel({ kind: 'embedding', rates: { input: 0.0375 } });
    expect(costOf(cheap, usage({ promptTokens: 1 }))).toBe(38);
    expect(costOf(cheap, usage({ promptTokens: 2 }))).toBe(75);
    expect(costOf(cheap, usage({ promptTokens: 3 }))).toBe(113);
    // svc-embed's 0.05 USD/1M is 50 nUSD per token
    expect(costOf(chatModel({ kind: 'embedding', rates: { input: 0.05 } }), usage({ promptTokens: 3 }))).toBe(
      150,
    );
  });

  it('charges nothing for a free model', () => {
    expect(
      costOf(chatModel({ flags: { free: true } }), usage({ promptTokens: 1e6, completionTokens: 1e6 })),
    ).toBe(0);
  });

  it('prices speech per input character and transcription per minute of audio', () => {
    const tts = chatModel({ kind: 'speech', rates: { input: 25 } });
    expect(costOf(tts, usage({ characters: 1000 }))).toBe(usdToNano(0.025));
    const stt = chatModel({ kind: 'transcription', rates: { input: 0.001 } });
    expect(costOf(stt, usage({ audioMs: 90_000 }))).toBe(usdToNano(0.0015));
  });
});

describe('parseUsd (amounts people type)', () => {
  it('reads up to nine decimals exactly, where a float lands a nano-dollar off', () => {
    expect(parseUsd('25')).toBe(25_000_000_000);
    expect(parseUsd('12.50')).toBe(12_500_000_000);
    expect(parseUsd('4341553.41828889')).toBe(4_341_553_418_288_890);
    expect(usdToNano(4341553.41828889)).toBe(4_341_553_418_288_891);
  });

  it('refuses what is not a plain decimal amount', () => {
    for (const text of ['abc', '1e3', '-1', '1.0000000001', '.5', '1.', ''])
      expect(parseUsd(text)).toBeNull();
  });
});
