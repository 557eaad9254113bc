import { describe, expect, test } from 'vitest';
import { embeddingVector, encodeBase64Vector, readInputs } from '#sim/embeddings.ts';

function norm(vector: Float32Array): number {
  return Math.sqrt(vector.reduce((sum, x) => sum + x * x, 0));
}

describe('embeddingVector', () => {
  test('is a deterministic unit vector of float32 values', () => {
    const vector = embeddingVector('hello', 1536);
    expect(vector).toHaveLength(1536);
    expect(norm(vector)).toBeCloseTo(1, 6);
    expect(embeddingVector('hello', 1536)).toEqual(vector);
    expect(embeddingVector('hello!', 1536)).not.toEqual(vector);
  });

  test('one dimension is ±1', () => {
    expect(Math.abs(embeddingVector('x', 1)[0] ?? 0)).toBe(1);
  });

  test('a shorter vector points the same way as the prefix of a longer one', () => {
    const short = embeddingVector('prefix', 8);
    const long = embeddingVector('prefix', 64);
    const scale = (short[0] ?? 0) / (long[0] ?? 1);
    short.forEach((x, i) => {
      expect(x).toBeCloseTo((long[i] ?? 0) * scale, 6);
    });
  });
});

describe('encodeBase64Vector', () => {
  test('is the little-endian float32 bytes', () => {
    const vector = new Float32Array([1, -0.5, 0.25]);
    const bytes = Buffer.from(encodeBase64Vector(vector), 'base64');
    expect(bytes.toString('hex')).toBe('0000803f000000bf0000803e');
  });
});

describe('readInputs', () => {
  test('normalises every accepted input shape with its token count', () => {
    expect(readInputs('Hello world')).toEqual([{ text: 'Hello world', tokens: 2 }]);
    expect(readInputs(['a', 'b c'])).toEqual([
      { text: 'a', tokens: 1 },
      { text: 'b c', tokens: 2 },
    ]);
    expect(readInputs([5, 6, 7])).toEqual([{ text: '5,6,7', tokens: 3 }]);
    expect(readInputs([[5], [6, 7]])).toEqual([
      { text: '5', tokens: 1 },
      { text: '6,7', tokens: 2 },
    ]);
  });

  test.each([undefined, null, '', [], [''], ['a', 2], [2, 'a'], [[1], 'a'], [[]], [-1], [{}], {}, true])(
    'rejects %j with a message',
    (input) => {
      expect(typeof readInputs(input)).toBe('string');
    },
  );
});
