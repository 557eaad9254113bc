import { describe, expect, it } from 'vitest';
import {
  base64ToVector,
  checkVectors,
  embeddingsCeiling,
  embeddingsFloor,
  embeddingsReplyLimitBytes,
  embeddingsUsage,
  encodeVector,
  prepareEmbeddings,
  upstreamEmbeddingsBody,
  vectorToBase64,
} from '#core/embeddings.ts';
import { InvalidRequestError } from '#core/errors.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import { costOf } from '#core/pricing.ts';
import type { Model } from '#core/registry.ts';
import { deployment, wordCounter } from '#test/fixtures.ts';

const embed: Model = {
  id: 'svc-embed',
  family: 'svc',
  kind: 'embedding',
  contextWindow: 10,
  dimensions: 8,
  rates: { input: 0.05 },
  flags: {},
  status: 'active',
  created: 0,
};

describe('prepareEmbeddings', () => {
  it('normalises every input shape to a list and counts tokens (token arrays by length)', () => {
    expect(prepareEmbeddings({ model: 'm', input: 'a b c' }, embed, wordCounter)).toMatchObject({
      inputs: ['a b c'],
      promptTokens: 3,
      encoding: 'float',
      dimensions: null,
    });
    expect(prepareEmbeddings({ model: 'm', input: ['a', 'b c'] }, embed, wordCounter).promptTokens).toBe(3);
    expect(prepareEmbeddings({ model: 'm', input: [7, 8, 9] }, embed, wordCounter).inputs).toEqual([
      [7, 8, 9],
    ]);
    expect(
      prepareEmbeddings({ model: 'm', input: [[1], [2, 3]], encoding_format: 'base64' }, embed, wordCounter),
    ).toMatchObject({ inputs: [[1], [2, 3]], promptTokens: 3, encoding: 'base64' });
  });

  it('refuses an input beyond the context window, naming it', () => {
    const long = 'w '.repeat(11);
    expect(() => prepareEmbeddings({ model: 'm', input: ['ok', long] }, embed, wordCounter)).toThrow(
      expect.objectContaining({ code: 'context_length_exceeded', param: 'input[1]' }),
    );
    expect(() => prepareEmbeddings({ model: 'm', input: long }, embed, wordCounter)).toThrow(
      expect.objectContaining({ param: 'input' }),
    );
  });

  it('stops counting once the request is past its limits: a text at its context, the inputs at 300,000 tokens', () => {
    // Counting is CPU before admission, from any key: it must cost what the limits allow, not what was sent.
    const limits: number[] = [];
    const counted: string[] = [];
    const counter = {
      count: () => {
        throw new Error('a size check counts up to its limit');
      },
      countUpTo: (text: string, limit: number) => {
        limits.push(limit);
        counted.push(text);
        return wordCounter.count(text);
      },
    };
    const wide: Model = { ...embed, contextWindow: 8_192 };
    const input = Array.from({ length: 2_048 }, () => 'w '.repeat(8_000));
    expect(() => prepareEmbeddings({ model: 'm', input }, wide, counter)).toThrow(
      expect.objectContaining({ code: 'context_length_exceeded', param: 'input' }),
    );
    // 38 inputs of 8,000 tokens pass 300,000: the other 2,010 are never counted.
    expect(counted).toHaveLength(38);
    expect(new Set(limits)).toEqual(new Set([8_192]));
  });

  it('refuses more dimensions than the model has', () => {
    expect(() => prepareEmbeddings({ model: 'm', input: 'x', dimensions: 9 }, embed, wordCounter)).toThrow(
      InvalidRequestError,
    );
    expect(prepareEmbeddings({ model: 'm', input: 'x', dimensions: 8 }, embed, wordCounter).dimensions).toBe(
      8,
    );
  });

  it('sends the upstream its own model name, the inputs as a list, and never the end-user id', () => {
    const prepared = prepareEmbeddings(
      { model: 'm', input: 'x', dimensions: 4, user: 'u-1' },
      embed,
      wordCounter,
    );
    expect(upstreamEmbeddingsBody(prepared, deployment({ upstreamModel: 'up-embed' }))).toEqual({
      model: 'up-embed',
      input: ['x'],
      encoding_format: 'float',
      dimensions: 4,
    });
  });
});

describe('vector encodings', () => {
  it('round-trips float32 values through little-endian base64', () => {
    const vector = [0.5, -0.25, Math.fround(0.1), 0];
    const encoded = vectorToBase64(vector);
    expect(Buffer.from(encoded, 'base64').readFloatLE(4)).toBe(-0.25);
    expect(base64ToVector(encoded)).toEqual(vector);
    expect(encodeVector(vector, 'base64')).toBe(encoded);
    expect(encodeVector(encoded, 'float')).toEqual(vector);
    expect(encodeVector(encoded, 'base64')).toBe(encoded);
    expect(encodeVector(vector, 'float')).toBe(vector);
  });

  it("pads an upstream's unpadded base64 for the client, as Python's decoder (the openai SDK's default) needs", () => {
    // 4 and 8 floats: 16 and 32 bytes, not multiples of 3, so their base64 ends in padding.
    for (const vector of [
      [0.5, -0.25, 1, 0],
      [1, 2, 3, 4, 5, 6, 7, 8],
    ]) {
      const encoded = vectorToBase64(vector);
      expect(encoded).toMatch(/=$/);
      expect(encodeVector(encoded.replace(/=+$/, ''), 'base64')).toBe(encoded);
    }
  });
});

describe('checkVectors', () => {
  const failureOf = (vectors: Parameters<typeof checkVectors>[1]): UpstreamFailure => {
    try {
      checkVectors(prepared, vectors);
    } catch (error) {
      if (error instanceof UpstreamFailure) return error;
    }
    throw new Error('no UpstreamFailure');
  };
  const prepared = prepareEmbeddings({ model: 'm', input: ['a', 'b'], dimensions: 2 }, embed, wordCounter);

  it('accepts one vector per input of the requested length, in either encoding', () => {
    expect(() => checkVectors(prepared, [[1, 0], vectorToBase64([0, 1])])).not.toThrow();
    // Unpadded base64 is still base64.
    expect(() => checkVectors(prepared, [[1, 0], vectorToBase64([0, 1]).replace(/=+$/, '')])).not.toThrow();
  });

  it.each([
    ['too few vectors', [[1, 0]]],
    [
      'a vector of the wrong length',
      [
        [1, 0],
        [1, 0, 0],
      ],
    ],
    ['base64 of the wrong length', [[1, 0], 'AAAA']],
    // 11 characters of junk measure as 8 bytes (two floats) without being decoded.
    ['junk of a vector’s length', [[1, 0], '!!!!!!!!!!!']],
    ['base64 of a NaN', [[1, 0], vectorToBase64([1, Number.NaN])]],
    ['base64 of an infinity', [[1, 0], vectorToBase64([Number.POSITIVE_INFINITY, 0])]],
    [
      'a non-number',
      [
        [1, 0],
        [1, Number.NaN],
      ],
    ],
  ])('fails over on %s', (_, vectors) => {
    expect(failureOf(vectors).kind).toBe('protocol');
  });

  it('takes vectors of another length than the client asked for as the deployment’s inability, not its fault', () => {
    // A provider that ignores `dimensions`: health must not count it (a client could open the circuit with it),
    // and the client is told in a 400 naming the option when no deployment can.
    expect(
      failureOf([
        [1, 0, 0],
        [0, 1, 0],
      ]),
    ).toMatchObject({
      kind: 'unsupported',
      status: 200,
      upstreamError: {
        code: 'invalid_value',
        param: 'dimensions',
        message: 'This model cannot return embeddings of 2 dimensions.',
      },
    });
  });
});

describe('embeddingsReplyLimitBytes', () => {
  it('fits the longest reply a request can have, and not much more', () => {
    const wide: Model = { ...embed, dimensions: 3072 };
    const prepared = prepareEmbeddings({ model: 'm', input: ['a', 'b', 'c'] }, wide, wordCounter);
    // Every float at its longest JSON form (`-0.000012345678901234568`), the items framed as OpenAI frames them.
    const vector = Array.from({ length: 3072 }, () => -1.2345678901234568e-5);
    const reply = JSON.stringify({
      object: 'list',
      data: prepared.inputs.map((_, index) => ({ object: 'embedding', index, embedding: vector })),
      model: 'text-embedding-3-large',
      usage: { prompt_tokens: 3, total_tokens: 3 },
    });
    const limit = embeddingsReplyLimitBytes(prepared);
    expect(Buffer.byteLength(reply)).toBeLessThanOrEqual(limit);
    // Pretty-printed, one float a line (two spaces a level, as json.dumps(indent=2) writes it).
    expect(Buffer.byteLength(JSON.stringify(JSON.parse(reply), null, 2))).toBeLessThanOrEqual(limit);
    expect(limit).toBeLessThan(Buffer.byteLength(reply) * 2);
    // A deployment that ignores the client's `dimensions` still gets its reply read, to be judged unable
    // (checkVectors), not cut as too large.
    const narrow = prepareEmbeddings(
      { model: 'm', input: ['a', 'b', 'c'], dimensions: 256 },
      wide,
      wordCounter,
    );
    expect(embeddingsReplyLimitBytes(narrow)).toBe(limit);
  });
});

/** The embedding model with another context window. */
const embedOf = (contextWindow: number): Model => ({ ...embed, contextWindow });

describe('embeddings billing', () => {
  it('bills input tokens at the model rate, from the upstream count or else our own', () => {
    const prepared = prepareEmbeddings({ model: 'm', input: 'a b c' }, embed, wordCounter);
    expect(embeddingsUsage(prepared, 7)).toMatchObject({ promptTokens: 7, source: 'upstream' });
    expect(embeddingsUsage(prepared, null)).toMatchObject({ promptTokens: 3, source: 'estimated' });
    // 0.05 USD per 1M tokens = 50 nano-USD per token.
    expect(costOf(embed, { ...embeddingsUsage(prepared, 1), promptTokens: 1_000_000 })).toBe(50_000_000);
    expect(costOf(embed, embeddingsUsage(prepared, 1))).toBe(50);
  });

  it('bills no less than the inputs must hold, and takes a report of 0 tokens for no report', () => {
    // Some OpenAI-compatible servers send zeros: billed as reported, every such call was served free.
    const prepared = prepareEmbeddings({ model: 'm', input: ['a b c', 'd'] }, embed, wordCounter);
    expect(embeddingsUsage(prepared, 0)).toMatchObject({ promptTokens: 4, source: 'estimated' });
    // Fewer than our count is the provider's tokenizer, not ours: billed, but each text is at least a token.
    expect(embeddingsFloor(prepared)).toBe(2);
    expect(embeddingsUsage(prepared, 1)).toMatchObject({ promptTokens: 2, source: 'upstream' });
    expect(embeddingsUsage(prepared, 3)).toMatchObject({ promptTokens: 3, source: 'upstream' });
    // Token ids are counted exactly, and mixed with text each kind has its own floor.
    const mixed = prepareEmbeddings({ model: 'm', input: [[1, 2, 3], [4]] }, embed, wordCounter);
    expect(embeddingsFloor(mixed)).toBe(4);
    expect(embeddingsUsage(mixed, 1).promptTokens).toBe(4);
  });

  it('bills no more than the inputs could hold: token ids exactly, text at most twice its bytes', () => {
    // Three token ids are three tokens, whatever the upstream says.
    const ids = prepareEmbeddings({ model: 'm', input: [1, 2, 3] }, embed, wordCounter);
    expect(embeddingsUsage(ids, 1_000_000_000).promptTokens).toBe(3);
    expect(embeddingsUsage(ids, 2).promptTokens).toBe(3);
    // "a b c" is 5 bytes: at most 2 × 5 + 8 tokens; "é" is 2 bytes: 12. A provider counting more than we do
    // (its tokenizer is not ours) is billed up to there.
    const text = prepareEmbeddings({ model: 'm', input: ['a b c', 'é'] }, embedOf(8_192), wordCounter);
    expect(embeddingsCeiling(text)).toBe(18 + 12);
    expect(embeddingsUsage(text, 25).promptTokens).toBe(25);
    expect(embeddingsUsage(text, 1_000_000_000).promptTokens).toBe(30);
    // Never past the model's context per input.
    const long = prepareEmbeddings({ model: 'm', input: 'word '.repeat(5_000) }, embedOf(8_192), wordCounter);
    expect(embeddingsCeiling(long)).toBe(8_192);
  });
});
