import { describe, expect, it } from 'vitest';
import type { TokenCounter } from '#core/ports.ts';
import { cachedTokenCounter } from '#core/token-count-cache.ts';

/** A counter that counts words, and records each text it was asked about. */
const recordingCounter = () => {
  const asked: string[] = [];
  const words = (text: string) => text.split(/\s+/).filter(Boolean).length;
  const counter: TokenCounter = {
    count: (text) => {
      asked.push(text);
      return words(text);
    },
    // Like the real one: past the limit, a bound above it rather than the count.
    countUpTo: (text, limit) => {
      asked.push(text);
      const n = words(text);
      return n <= limit ? n : limit + 1;
    },
  };
  return { counter, asked };
};

/** A text of `chars` characters (words of four letters). */
const text = (chars: number, seed: string) => `${seed} `.padEnd(chars, 'abc ');

describe('cachedTokenCounter', () => {
  it('counts a text once and answers again from memory, with the same figure', () => {
    const { counter, asked } = recordingCounter();
    const cached = cachedTokenCounter(counter, 10_000);
    const prompt = text(500, 'system');
    const first = cached.count(prompt);
    // A different string object with the same characters (as each request's JSON parse makes) is a hit too.
    const again = cached.count(`${prompt.slice(0, 250)}${prompt.slice(250)}`);
    expect(again).toBe(first);
    expect(first).toBe(recordingCounter().counter.count(prompt));
    expect(asked).toEqual([prompt]);
  });

  /** Asserts that `kept` are answered from memory and `forgotten` is counted again. */
  const expectKept = (
    { cached, asked }: { cached: TokenCounter; asked: string[] },
    kept: readonly string[],
    forgotten: string,
  ) => {
    asked.length = 0;
    for (const t of kept) cached.count(t);
    expect(asked).toEqual([]);
    cached.count(forgotten);
    expect(asked).toEqual([forgotten]);
  };

  it('keeps no more characters than its budget, forgetting first a text not used again', () => {
    const { counter, asked } = recordingCounter();
    // Room for two 400-character texts with their allowance, not three.
    const cached = cachedTokenCounter(counter, 1_000);
    const [a, b, c] = [text(400, 'a'), text(400, 'b'), text(400, 'c')];
    for (const t of [a, b, a]) cached.count(t); // a is used again
    cached.count(c); // b goes
    expectKept({ cached, asked }, [a, c], b);
  });

  it('when every text it holds is in use, forgets the oldest of them, not the newcomer', () => {
    const { counter, asked } = recordingCounter();
    // Room for three 250-character texts with their allowance.
    const cached = cachedTokenCounter(counter, 1_000);
    const [a, b, c, d] = [text(250, 'a'), text(250, 'b'), text(250, 'c'), text(250, 'd')];
    for (const t of [a, b, c, a, b, c]) cached.count(t);
    cached.count(d); // a, b and c are all in use: a, the oldest, goes
    expectKept({ cached, asked }, [b, c, d], a);
  });

  it('counts a text larger than its budget every time, and keeps what it held', () => {
    const { counter, asked } = recordingCounter();
    const cached = cachedTokenCounter(counter, 1_000);
    const small = text(100, 'small');
    const huge = text(5_000, 'huge');
    cached.count(small);
    cached.count(huge);
    cached.count(huge);
    cached.count(small);
    expect(asked).toEqual([small, huge, huge]);
  });

  it('answers a size check from memory, and remembers only exact figures from one', () => {
    const { counter, asked } = recordingCounter();
    const cached = cachedTokenCounter(counter, 100_000);
    const long = text(4_000, 'long'); // ~1,000 words
    // Past the limit the inner counter gives only a bound: not remembered, so `count` still counts it exactly.
    expect(cached.countUpTo(long, 10)).toBe(11);
    expect(cached.count(long)).toBe(recordingCounter().counter.count(long));
    // Now remembered: the size check is answered with the exact figure, which is above the limit as required.
    asked.length = 0;
    expect(cached.countUpTo(long, 10)).toBeGreaterThan(10);
    const short = text(40, 'short');
    expect(cached.countUpTo(short, 1_000)).toBe(cached.count(short));
    expect(asked).toEqual([short]);
  });
});
