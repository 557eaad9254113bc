import { encode } from 'gpt-tokenizer';
import { describe, expect, test } from 'vitest';
import { fnv1a, generateWords, mulberry32, naturalWordCount, VOCABULARY } from '#sim/text.ts';

describe('the completion vocabulary', () => {
  test('every word is a single o200k token with a leading space', () => {
    const multiToken = VOCABULARY.filter((word) => encode(` ${word}`).length !== 1);
    expect(multiToken).toEqual([]);
  });

  test('every word is also a single token on its own, since a completion starts without a space', () => {
    const multiToken = VOCABULARY.filter((word) => encode(word).length !== 1);
    expect(multiToken).toEqual([]);
  });

  test('words are distinct lowercase letters only, so they never need JSON escaping', () => {
    expect(new Set(VOCABULARY).size).toBe(VOCABULARY.length);
    expect(VOCABULARY.every((word) => /^[a-z]+$/.test(word))).toBe(true);
  });
});

describe('generated text', () => {
  test('text of N words joined by spaces encodes to exactly N tokens', () => {
    for (let seed = 0; seed < 500; seed++) {
      const count = seed % 40;
      const text = generateWords(fnv1a(String(seed)), count).join(' ');
      expect(encode(text).length).toBe(count);
    }
  });

  test('the same hash always yields the same words', () => {
    const hash = fnv1a('same prompt');
    expect(generateWords(hash, 20)).toEqual(generateWords(hash, 20));
  });

  test('a shorter count yields a prefix of a longer one, so truncation keeps the start of the text', () => {
    const hash = fnv1a('prefix');
    expect(generateWords(hash, 20).slice(0, 5)).toEqual(generateWords(hash, 5));
  });

  test('different hashes yield different text', () => {
    expect(generateWords(fnv1a('a'), 20)).not.toEqual(generateWords(fnv1a('b'), 20));
  });

  test('the natural length is between 8 and 31 words', () => {
    const lengths = new Set<number>();
    for (let i = 0; i < 2000; i++) lengths.add(naturalWordCount(fnv1a(String(i))));
    expect(Math.min(...lengths)).toBe(8);
    expect(Math.max(...lengths)).toBe(31);
  });
});

describe('hashing and randomness', () => {
  test('fnv1a matches the reference 32-bit FNV-1a values', () => {
    expect(fnv1a('')).toBe(0x811c9dc5);
    expect(fnv1a('a')).toBe(0xe40c292c);
    expect(fnv1a('foobar')).toBe(0xbf9cf968);
  });

  test('fnv1a continued from a previous state equals hashing the concatenation', () => {
    expect(fnv1a('bar', fnv1a('foo'))).toBe(fnv1a('foobar'));
  });

  test('mulberry32 is deterministic and stays within [0, 1)', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    for (let i = 0; i < 1000; i++) {
      const value = a();
      expect(value).toBe(b());
      expect(value).toBeGreaterThanOrEqual(0);
      expect(value).toBeLessThan(1);
    }
  });
});
