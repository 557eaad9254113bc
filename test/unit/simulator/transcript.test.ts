import { encode } from 'gpt-tokenizer';
import { describe, expect, test } from 'vitest';
import { fnv1aBytes } from '#sim/text.ts';
import { buildTranscript, transcriptWordCount, WORDS_PER_SEGMENT } from '#sim/transcript.ts';

describe('transcriptWordCount', () => {
  test('is 2.5 words per second, rounded, and at least one', () => {
    expect(transcriptWordCount(7.3)).toBe(18);
    expect(transcriptWordCount(10)).toBe(25);
    expect(transcriptWordCount(0.1)).toBe(1);
    expect(transcriptWordCount(0)).toBe(1);
  });
});

describe('buildTranscript', () => {
  test('is capitalised vocabulary words with a final period', () => {
    const { text, words } = buildTranscript(42, 7.3, 0);
    expect(text).toMatch(/^[A-Z][a-z]*( [a-z]+){17}\.$/);
    expect(words.map((w) => w.word).join(' ')).toBe(text.slice(0, -1));
  });

  test('is deterministic per hash', () => {
    expect(buildTranscript(7, 12, 0)).toEqual(buildTranscript(7, 12, 0));
    expect(buildTranscript(7, 12, 0).text).not.toBe(buildTranscript(8, 12, 0).text);
  });

  test('spreads words evenly from 0 to the duration', () => {
    const { words } = buildTranscript(1, 4, 0);
    expect(words).toHaveLength(10);
    expect(words[0]).toMatchObject({ start: 0, end: 0.4 });
    expect(words[5]).toMatchObject({ start: 2, end: 2.4 });
    expect(words.at(-1)?.end).toBe(4);
    words.slice(1).forEach((word, i) => {
      expect(word.start).toBe(words[i]?.end);
    });
  });

  test('groups words into segments of 12 whose texts concatenate to the transcript', () => {
    const { text, segments, words } = buildTranscript(99, 40, 0.2);
    expect(words).toHaveLength(100);
    expect(segments).toHaveLength(Math.ceil(100 / WORDS_PER_SEGMENT));
    expect(
      segments
        .map((s) => s.text)
        .join('')
        .trim(),
    ).toBe(text);
    expect(segments.map((s) => s.id)).toEqual(segments.map((_, i) => i));
    for (const [i, segment] of segments.entries()) {
      expect(segment.text.startsWith(' ')).toBe(true);
      expect(segment.tokens).toEqual(encode(segment.text));
      expect(segment.start).toBe(words[i * WORDS_PER_SEGMENT]?.start);
      expect(segment.temperature).toBe(0.2);
      expect(segment.seek).toBe(Math.floor(segment.start / 30) * 3000);
      expect(segment.avg_logprob).toBeLessThan(0);
      expect(segment.compression_ratio).toBeGreaterThan(1);
      expect(segment.no_speech_prob).toBeGreaterThan(0);
      expect(segment.no_speech_prob).toBeLessThan(0.1);
    }
    expect(segments.at(-1)?.end).toBe(40);
    expect(segments.at(-1)?.text.endsWith('.')).toBe(true);
  });
});

describe('fnv1aBytes', () => {
  test('hashes bytes like fnv1a hashes the same char codes, quickly for a large file', () => {
    const bytes = Buffer.from('hello', 'latin1');
    expect(fnv1aBytes(bytes)).toBe(0x4f9f2cab);
    const large = Buffer.alloc(4 * 1024 * 1024, 7);
    const started = performance.now();
    fnv1aBytes(large);
    expect(performance.now() - started).toBeLessThan(500);
    expect(fnv1aBytes(Buffer.from([1, 2]))).not.toBe(fnv1aBytes(Buffer.from([2, 1])));
  });
});
