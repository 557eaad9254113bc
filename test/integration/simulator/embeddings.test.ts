import { encode } from 'gpt-tokenizer';
import { describe, expect, test } from 'vitest';
import { DEFAULT_EMBEDDING_DIMENSIONS } from '#sim/embeddings.ts';
import { OVERLOADED_ERROR } from '#sim/errors.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { isSocketError, type PostOptions, postJson, readText } from './client.ts';
import { useSimulator } from './use-simulator.ts';

const PATH = '/v1/embeddings';
const MODEL = 'text-embedding-3-small';

const sim = useSimulator();

interface EmbeddingList<T = number[]> {
  object: string;
  data: Array<{ object: string; index: number; embedding: T }>;
  model: string;
  usage?: { prompt_tokens: number; total_tokens: number };
}

async function embed(body: Record<string, unknown>, options?: PostOptions): Promise<EmbeddingList> {
  const response = await postJson(sim().url, PATH, { model: MODEL, ...body }, options);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('application/json');
  return (await response.json()) as EmbeddingList;
}

async function embedBase64(body: Record<string, unknown>): Promise<EmbeddingList<string>> {
  const response = await postJson(sim().url, PATH, { model: MODEL, encoding_format: 'base64', ...body });
  expect(response.status).toBe(200);
  return (await response.json()) as EmbeddingList<string>;
}

async function rejection(body: unknown): Promise<{ message: string; type: string; param: string | null }> {
  const response = await postJson(sim().url, PATH, body);
  expect(response.status).toBe(400);
  return ((await response.json()) as { error: { message: string; type: string; param: string | null } })
    .error;
}

function norm(vector: readonly number[]): number {
  return Math.sqrt(vector.reduce((sum, x) => sum + x * x, 0));
}

function decodeBase64(text: string): number[] {
  const bytes = Buffer.from(text, 'base64');
  const values: number[] = [];
  for (let offset = 0; offset < bytes.length; offset += 4) values.push(bytes.readFloatLE(offset));
  return values;
}

describe('vectors', () => {
  test('a string input gets one OpenAI-shaped, unit-length vector of 1536 dimensions', async () => {
    const list = await embed({ input: 'The quick brown fox' });
    expect(schemaErrors('CreateEmbeddingResponse', list)).toBe('');
    expect(list.object).toBe('list');
    expect(list.model).toBe(MODEL);
    expect(list.data).toHaveLength(1);
    const [first] = list.data;
    expect(first?.object).toBe('embedding');
    expect(first?.index).toBe(0);
    expect(first?.embedding).toHaveLength(DEFAULT_EMBEDDING_DIMENSIONS);
    expect(norm(first?.embedding ?? [])).toBeCloseTo(1, 5);
    expect(first?.embedding.every((x) => x >= -1 && x <= 1 && Math.fround(x) === x)).toBe(true);
  });

  test('identical inputs give identical vectors and different inputs different ones', async () => {
    const a = await embed({ input: ['alpha', 'beta', 'alpha'] });
    const b = await embed({ input: 'alpha' });
    expect(a.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(a.data[0]?.embedding).toEqual(a.data[2]?.embedding);
    expect(a.data[0]?.embedding).toEqual(b.data[0]?.embedding);
    expect(a.data[0]?.embedding).not.toEqual(a.data[1]?.embedding);
  });

  test('token ids embed like their comma-joined text, arrays of token arrays one vector each', async () => {
    const single = await embed({ input: [1212, 318, 257] });
    const nested = await embed({ input: [[1212, 318, 257], [13]] });
    const text = await embed({ input: '1212,318,257' });
    expect(single.data).toHaveLength(1);
    expect(nested.data).toHaveLength(2);
    expect(single.data[0]?.embedding).toEqual(nested.data[0]?.embedding);
    expect(single.data[0]?.embedding).toEqual(text.data[0]?.embedding);
    expect(nested.data[1]?.embedding).not.toEqual(nested.data[0]?.embedding);
  });

  test('dimensions sets the length; a shorter vector is the re-normalised prefix of a longer one', async () => {
    const short = (await embed({ input: 'prefix', dimensions: 256 })).data[0]?.embedding ?? [];
    const long = (await embed({ input: 'prefix', dimensions: 3072 })).data[0]?.embedding ?? [];
    expect(short).toHaveLength(256);
    expect(long).toHaveLength(3072);
    expect(norm(short)).toBeCloseTo(1, 5);
    expect(norm(long)).toBeCloseTo(1, 5);
    const ratio = (short[0] ?? 0) / (long[0] ?? 1);
    short.forEach((x, i) => {
      expect(x / (long[i] ?? 1)).toBeCloseTo(ratio, 4);
    });
  });

  test('base64 is the little-endian float32 bytes of exactly the float vector', async () => {
    const input = ['same text', 'another text'];
    const floats = await embed({ input, dimensions: 64 });
    const base64 = await embedBase64({ input, dimensions: 64 });
    expect(base64.data.map((d) => typeof d.embedding)).toEqual(['string', 'string']);
    expect(base64.data.map((d) => decodeBase64(d.embedding))).toEqual(floats.data.map((d) => d.embedding));
    const full = await embedBase64({ input: 'default size' });
    expect(Buffer.from(full.data[0]?.embedding ?? '', 'base64')).toHaveLength(
      DEFAULT_EMBEDDING_DIMENSIONS * 4,
    );
  });
});

describe('usage', () => {
  test('prompt and total tokens are the o200k token counts of the inputs', async () => {
    const input = ['Hello, world!', 'Embeddings are vectors.', '<|endoftext|> is plain text here'];
    const expected = input.reduce(
      (sum, text) => sum + encode(text, { disallowedSpecial: new Set() }).length,
      0,
    );
    expect((await embed({ input })).usage).toEqual({ prompt_tokens: expected, total_tokens: expected });
  });

  test('token-id inputs count their length', async () => {
    expect(
      (
        await embed({
          input: [
            [1, 2, 3],
            [4, 5],
          ],
        })
      ).usage,
    ).toEqual({ prompt_tokens: 5, total_tokens: 5 });
    expect((await embed({ input: [7, 8, 9, 10] })).usage?.prompt_tokens).toBe(4);
  });

  test('the x-sim-omit-usage header leaves usage out', async () => {
    const list = await embed({ input: 'count me yourself' }, { headers: { 'x-sim-omit-usage': '1' } });
    expect(list).not.toHaveProperty('usage');
    expect(list.data).toHaveLength(1);
  });

  test('an inline omit_usage directive leaves usage out and still counts as text', async () => {
    const list = await embed({ input: ['plain', 'with [[sim: omit_usage=1]] directive'] });
    expect(list).not.toHaveProperty('usage');
    const again = await embed({ input: ['with [[sim: omit_usage=1]] directive'] });
    expect(again.data[0]?.embedding).toEqual(list.data[1]?.embedding);
  });

  test('a provider spec can omit usage, and omit_usage=0 turns it back on for one request', async () => {
    sim().setFaults('emb-quiet', { omitUsage: true });
    expect(await embed({ input: 'x' }, { provider: 'emb-quiet' })).not.toHaveProperty('usage');
    const list = await embed({ input: 'x' }, { provider: 'emb-quiet', headers: { 'x-sim-omit-usage': '0' } });
    expect(list.usage).toEqual({ prompt_tokens: 1, total_tokens: 1 });
  });

  test('an omit_usage value other than 0 or 1 is rejected', async () => {
    const response = await postJson(
      sim().url,
      PATH,
      { model: MODEL, input: 'x' },
      {
        headers: { 'x-sim-omit-usage': 'yes' },
      },
    );
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toContain(
      'x-sim-omit-usage',
    );
  });
});

describe('invalid requests', () => {
  test('a missing model or input is a 400 naming the parameter', async () => {
    expect((await rejection({ input: 'x' })).message).toBe('you must provide a model parameter');
    expect(await rejection({ model: MODEL })).toEqual({
      message: "Missing required parameter: 'input'.",
      type: 'invalid_request_error',
      param: 'input',
      code: 'missing_required_parameter',
    });
  });

  test.each([
    ['an empty string', ''],
    ['an empty array', []],
    ['an empty string in an array', ['a', '']],
    ['mixed strings and numbers', ['a', 1]],
    ['mixed token ids and strings', [1, 'a']],
    ['a negative token id', [1, -2]],
    ['a fractional token id', [1.5]],
    ['an empty token array', [[1], []]],
    ['an object', { text: 'a' }],
    ['a number', 42],
  ])('input as %s is a 400 with param input', async (_name, input) => {
    const error = await rejection({ model: MODEL, input });
    expect(error.type).toBe('invalid_request_error');
    expect(error.param).toBe('input');
  });

  test('more than 2048 inputs is a 400', async () => {
    expect((await rejection({ model: MODEL, input: new Array(2049).fill('a') })).param).toBe('input');
  });

  test.each([0, 3073, 1.5, '256', -1])('dimensions %j is a 400', async (dimensions) => {
    expect((await rejection({ model: MODEL, input: 'a', dimensions })).param).toBe('dimensions');
  });

  test.each(['hex', 'FLOAT', 1])('encoding_format %j is a 400', async (format) => {
    expect((await rejection({ model: MODEL, input: 'a', encoding_format: format })).param).toBe(
      'encoding_format',
    );
  });

  test('a body that is not JSON is a 400', async () => {
    expect((await rejection('{"model":')).type).toBe('invalid_request_error');
  });

  test('unknown fields and null optional fields are ignored', async () => {
    const list = await embed({ input: 'a', user: 'u-1', extra: { any: 'thing' }, dimensions: null });
    expect(list.data[0]?.embedding).toHaveLength(DEFAULT_EMBEDDING_DIMENSIONS);
  });

  test('a request without a key is a 401', async () => {
    const response = await postJson(sim().url, PATH, { model: MODEL, input: 'a' }, { key: null });
    expect(response.status).toBe(401);
  });
});

describe('faults', () => {
  test('a provider fault applies on its /p/<provider> path only', async () => {
    sim().setFaults('emb-a', { error: 'overloaded' });
    const failed = await postJson(sim().url, PATH, { model: MODEL, input: 'a' }, { provider: 'emb-a' });
    expect(failed.status).toBe(429);
    expect(await failed.json()).toEqual(OVERLOADED_ERROR);
    expect(
      (await postJson(sim().url, PATH, { model: MODEL, input: 'a' }, { provider: 'emb-b' })).status,
    ).toBe(200);
    expect(sim().calls('emb-a')).toEqual([
      expect.objectContaining({ path: PATH, model: MODEL, fault: 'overloaded' }),
    ]);
  });

  test('drop_mid sends a 200 with about half the JSON, then fails', async () => {
    const whole = await (await postJson(sim().url, PATH, { model: MODEL, input: 'cut me' })).text();
    sim().setFaults('emb-a', { error: 'drop_mid' });
    const response = await postJson(
      sim().url,
      PATH,
      { model: MODEL, input: 'cut me' },
      { provider: 'emb-a' },
    );
    expect(response.status).toBe(200);
    const { text, error } = await readText(response);
    expect(isSocketError(error)).toBe(true);
    expect(text.length).toBeGreaterThan(whole.length / 4);
    expect(text.length).toBeLessThan(whole.length);
  });

  test('an inline directive in any input string injects a fault', async () => {
    const response = await postJson(sim().url, PATH, {
      model: MODEL,
      input: ['fine', 'broken [[sim: fault=server_error]]'],
    });
    expect(response.status).toBe(500);
  });

  test('a malformed inline directive is a 400', async () => {
    expect((await rejection({ model: MODEL, input: '[[sim: omit_usage=maybe]]' })).message).toContain(
      'omit_usage',
    );
  });

  test('the call log keeps the request body', async () => {
    await embed({ input: ['a', 'b'], dimensions: 8 }, { provider: 'emb-log', key: 'sk-log' });
    expect(sim().calls('emb-log')).toEqual([
      expect.objectContaining({
        path: PATH,
        key: 'sk-log',
        stream: false,
        body: { model: MODEL, input: ['a', 'b'], dimensions: 8 },
      }),
    ]);
  });
});
