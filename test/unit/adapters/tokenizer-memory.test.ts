import { describe, expect, it } from 'vitest';
import { o200kTokenCounter } from '#adapters/tokenizer.ts';
import { heapAfterCollection } from '#test/heap.ts';

/**
 * What the token counter keeps alive after counting. gpt-tokenizer's merge cache keys are pre-tokens cut from the
 * text, and in V8 a cut of 13 characters or more keeps the string it was cut from: a prompt with a word the cache had
 * not seen stayed in memory as long as the cache held that word. Prompts are counted before admission, from any key.
 */

/** A 16-letter word no earlier prompt had (not one token: the BPE merges it, and its cache keeps it). */
const novelWord = (i: number): string =>
  `zqxj${Array.from(i.toString(26).padStart(12, '0'), (c) => String.fromCharCode(97 + Number.parseInt(c, 26))).join('')}`;

describe('the token counter’s memory', () => {
  it('keeps no more than its budget of prompts alive, however many new words they bring', () => {
    const before = heapAfterCollection();
    // 600 prompts of 30 KB, each with one new word: 18 MB of prompts, each kept whole by its word before.
    for (let i = 0; i < 600; i++) {
      const prompt = `${novelWord(i)} ${'lorem ipsum dolor '.repeat(1_700)}`;
      expect(o200kTokenCounter.count(prompt)).toBeGreaterThan(5_000);
    }
    const grown = heapAfterCollection() - before;
    expect(grown).toBeLessThan(8 * 1024 * 1024);
  });
});
