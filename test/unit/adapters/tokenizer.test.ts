import { countTokens, DEFAULT_MERGE_CACHE_SIZE } from 'gpt-tokenizer';
import { describe, expect, it, vi } from 'vitest';
import { o200kTokenCounter } from '#adapters/tokenizer.ts';

/** Every text the BPE itself is handed, to check no long run reaches it, and its merge cache's size then. */
const seen: string[] = [];
const cacheSizeWhenSeen: number[] = [];
vi.mock('gpt-tokenizer', async (importOriginal) => {
  const original = await importOriginal<typeof import('gpt-tokenizer')>();
  let cacheSize = original.DEFAULT_MERGE_CACHE_SIZE;
  return {
    ...original,
    countTokens: (text: string, options?: Parameters<typeof original.countTokens>[1]) => {
      seen.push(text);
      cacheSizeWhenSeen.push(cacheSize);
      return original.countTokens(text, options);
    },
    setMergeCacheSize: (size: number) => {
      cacheSize = size;
      original.setMergeCacheSize(size);
    },
  };
});

const letters = (n: number) =>
  Array.from({ length: n }, (_, i) => String.fromCharCode(97 + ((i * 7919) % 26))).join('');
const longestRun = (text: string) => Math.max(0, ...(text.match(/\S+|\s+/g) ?? []).map((r) => r.length));

describe('o200kTokenCounter', () => {
  it('counts ordinary text exactly as the BPE does', () => {
    for (const text of [
      '',
      'hello',
      'The quick brown fox jumps over the lazy dog. '.repeat(500),
      '😀 '.repeat(300),
    ]) {
      expect(o200kTokenCounter.count(text)).toBe(text === '' ? 0 : countTokens(text));
    }
  });

  it('never hands the BPE a run of over 256 non-space or space characters (its cost is quadratic in a run)', () => {
    seen.length = 0;
    const text = `Start. ${letters(200_000)} middle ${'!?'.repeat(5_000)}${' \t'.repeat(40_000)}${'\n'.repeat(9_000)} end.`;
    o200kTokenCounter.count(text);
    expect(seen.length).toBeGreaterThan(700);
    expect(Math.max(...seen.map(longestRun))).toBeLessThanOrEqual(256);
  });

  it('counts a long run within a token per 256 characters of the whole run’s count', () => {
    const run = letters(20_000);
    const exact = countTokens(run);
    const sliced = o200kTokenCounter.count(`a ${run} b`);
    expect(sliced - countTokens('a  b')).toBeGreaterThanOrEqual(exact);
    expect(sliced - countTokens('a  b') - exact).toBeLessThanOrEqual(Math.ceil(20_000 / 256));
  });

  it('counts a long piece with the BPE merge cache off (its eviction is quadratic in V8), then turns it back on', () => {
    const words = Array.from({ length: 6_000 }, (_, i) => `w${(i * 2654435761) % 1_000_003}x`).join(' ');
    const short = 'The quick brown fox jumps over the lazy dog.';
    const exact = [countTokens(words), countTokens(short)];
    seen.length = 0;
    cacheSizeWhenSeen.length = 0;
    expect([o200kTokenCounter.count(words), o200kTokenCounter.count(short)]).toEqual(exact);
    expect(seen.map((text, i) => [text.length >= 32_768, cacheSizeWhenSeen[i]])).toEqual([
      [true, 0],
      [false, DEFAULT_MERGE_CACHE_SIZE],
    ]);
  });

  it('does not split a surrogate pair between slices', () => {
    seen.length = 0;
    const run = `a${'😀'.repeat(300)}`; // 601 UTF-16 units: a slice boundary falls inside a pair
    o200kTokenCounter.count(run);
    for (const slice of seen) expect(slice).not.toMatch(/^[\uDC00-\uDFFF]|[\uD800-\uDBFF]$/);
  });

  describe('countUpTo: a size check that costs what the limit allows', () => {
    const prose = (n: number) =>
      Array.from({ length: n }, (_, i) => `word${i % 97} 東京${i % 13}。 `).join('');

    it('is the exact count when the text is within the limit, short or long', () => {
      for (const text of ['', 'hello there', prose(200), prose(9_000)]) {
        const exact = o200kTokenCounter.count(text);
        expect(o200kTokenCounter.countUpTo(text, exact)).toBe(exact);
        expect(o200kTokenCounter.countUpTo(text, exact + 10_000)).toBe(exact);
      }
    });

    it('stops early past the limit, with a number that is above the limit and at most the real count', () => {
      const text = prose(200_000); // ~3.4 MB
      const exact = o200kTokenCounter.count(text);
      seen.length = 0;
      const counted = o200kTokenCounter.countUpTo(text, 8_192);
      expect(counted).toBeGreaterThan(8_192);
      expect(counted).toBeLessThanOrEqual(exact);
      // Only the first chunks were handed to the BPE: a few tens of thousands of characters, not millions.
      expect(seen.reduce((n, s) => n + s.length, 0)).toBeLessThan(100_000);
    });

    it('is never above the limit for a text within it, however its long runs fall across chunks', () => {
      // A run of 120,000 characters without a space, sliced by `count` from its start: a size check that cut it
      // elsewhere would slice it out of phase, splitting every "abcd" token at a slice boundary.
      for (const text of [
        `ab ${'abcd'.repeat(30_000)}`,
        `a ${'xyz1'.repeat(30_000)} end`,
        '東京'.repeat(40_000),
      ]) {
        const exact = o200kTokenCounter.count(text);
        expect(o200kTokenCounter.countUpTo(text, exact)).toBe(exact);
      }
    });

    it('counts one text just over the limit as over it', () => {
      const text = prose(6_000);
      const exact = o200kTokenCounter.count(text);
      expect(o200kTokenCounter.countUpTo(text, exact - 1)).toBeGreaterThan(exact - 1);
    });
  });
});
