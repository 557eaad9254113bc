import { countTokens } from 'gpt-tokenizer';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { debitOf, fundedAccount, settledWallet } from '#test/billing.ts';
import { compileOpenAiSchema } from '#test/openapi-schemas.ts';
import { startTestStack, type TestStack, takeSettlements } from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ consumers: true });
});
afterAll(() => t?.stop());
afterEach(() => t.simulator.resetFaults());

/** svc-embed: 0.05 USD per 1M input tokens = 50 nano-USD per token. */
const NANO_PER_TOKEN = 50;

const sdk = (key: string) => new OpenAI({ baseURL: t.baseURL, apiKey: key, maxRetries: 0 });

const post = (key: string, body: Record<string, unknown>) =>
  fetch(`${t.baseURL}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((sum, x) => sum + x * x, 0));

describe('POST /v1/embeddings with the official openai SDK', () => {
  it('decodes the default base64 reply to the same vectors an explicit float request gets', async () => {
    const { key } = await fundedAccount(t);
    const input = ['The quick brown fox', 'jumps over the lazy dog'];
    const byDefault = await sdk(key).embeddings.create({ model: 'svc-embed', input });
    const asFloat = await sdk(key).embeddings.create({ model: 'svc-embed', input, encoding_format: 'float' });
    expect(byDefault.model).toBe('svc-embed');
    expect(byDefault.data).toHaveLength(2);
    expect(byDefault.data.map((d) => d.index)).toEqual([0, 1]);
    for (const [i, item] of byDefault.data.entries()) {
      expect(item.embedding).toHaveLength(1536);
      expect(Array.from(item.embedding)).toEqual(asFloat.data[i]?.embedding);
      expect(norm(item.embedding)).toBeCloseTo(1, 5);
    }
    expect(Array.from(byDefault.data[0]?.embedding ?? [])).not.toEqual(
      Array.from(byDefault.data[1]?.embedding ?? []),
    );
    const tokens = countTokens(input[0] as string) + countTokens(input[1] as string);
    expect(byDefault.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
  });

  it('honours dimensions and token-id input', async () => {
    const { key } = await fundedAccount(t);
    const reply = await sdk(key).embeddings.create({
      model: 'svc-embed',
      input: [
        [1, 2, 3],
        [4, 5],
      ],
      dimensions: 256,
      encoding_format: 'float',
    });
    expect(reply.data.map((d) => d.embedding.length)).toEqual([256, 256]);
    expect(reply.usage.prompt_tokens).toBe(5);
  });
});

describe('the embeddings wire format', () => {
  it('validates against OpenAI’s CreateEmbeddingResponse schema, in both encodings', async () => {
    const { key } = await fundedAccount(t);
    const validate = compileOpenAiSchema('CreateEmbeddingResponse');
    for (const encoding_format of ['float', 'base64']) {
      const response = await post(key, { model: 'svc-embed', input: 'hello', encoding_format });
      expect(response.headers.get('content-type')).toBe('application/json');
      const body = (await response.json()) as { data: { embedding: unknown }[] };
      if (encoding_format === 'float') expect(validate(body), JSON.stringify(validate.errors)).toBe(true);
      else {
        // The schema only knows float arrays; a base64 reply differs in exactly that field, as OpenAI's does.
        expect(typeof body.data[0]?.embedding).toBe('string');
        expect(Buffer.from(body.data[0]?.embedding as string, 'base64')).toHaveLength(1536 * 4);
      }
    }
  });

  it.each([
    [{ input: '' }, 'input'],
    [{ input: [] }, 'input'],
    [{ input: 'x', encoding_format: 'int8' }, 'encoding_format'],
    [{ input: 'x', dimensions: 0 }, 'dimensions'],
    [{ input: 'x', dimensions: 4096 }, 'dimensions'],
    [{ input: [[-1]] }, 'input[0][0]'],
    [{ input: 'x', logprobs: true }, 'logprobs'],
  ])('refuses %j with 400 naming %s', async (body, param) => {
    const { key } = await fundedAccount(t);
    const response = await post(key, { model: 'svc-embed', ...body });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { param: string } }).error.param).toBe(param);
  });

  it('refuses an input longer than the model’s 8,192-token context with context_length_exceeded', async () => {
    const { key } = await fundedAccount(t);
    const response = await post(key, { model: 'svc-embed', input: ['ok', 'word '.repeat(9000)] });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: unknown }).error).toMatchObject({
      code: 'context_length_exceeded',
      param: 'input[1]',
    });
  });
});

describe('billing of embeddings', () => {
  it('debits 0.05 USD per 1M input tokens, from the upstream’s usage', async () => {
    const { id, key } = await fundedAccount(t);
    const input = 'Billing is exact to the nano-dollar.';
    const response = await post(key, { model: 'svc-embed', input });
    expect(response.status).toBe(200);
    const requestId = response.headers.get('x-request-id') as string;
    const wallet = await settledWallet(t, id);
    expect(debitOf(wallet, requestId)).toBe(countTokens(input) * NANO_PER_TOKEN);
  });

  it('counts the tokens itself when the upstream reports no usage', async () => {
    const { id, key } = await fundedAccount(t);
    const input = ['first text to embed', 'a second one [[sim: omit_usage=1]]'];
    const response = await post(key, { model: 'svc-embed', input });
    expect(response.status).toBe(200);
    const tokens = countTokens(input[0] as string) + countTokens(input[1] as string);
    expect(((await response.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens).toBe(
      tokens,
    );
    const wallet = await settledWallet(t, id);
    expect(debitOf(wallet, response.headers.get('x-request-id') as string)).toBe(tokens * NANO_PER_TOKEN);
  });
});

describe('a faulty embeddings upstream', () => {
  it('is not billed when every deployment fails, and the client gets a 500', async () => {
    const { id, key } = await fundedAccount(t);
    t.simulator.setFaults('sim-a', { error: 'server_error' });
    t.simulator.setFaults('sim-b', { error: 'drop_mid' });
    const response = await post(key, { model: 'svc-embed', input: 'never embedded' });
    expect(response.status).toBe(500);
    const wallet = await settledWallet(t, id);
    expect(debitOf(wallet, response.headers.get('x-request-id') as string)).toBeUndefined();
    expect(wallet.balance).toBe(wallet.available);
  });

  it('records the serving deployment and the failed attempts in the settlement record', async () => {
    const stack = await startTestStack();
    try {
      const { key } = await fundedAccount(stack);
      stack.simulator.setFaults('sim-a', { error: 'overloaded' });
      const response = await fetch(`${stack.baseURL}/embeddings`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'svc-embed', input: 'x' }),
      });
      expect(response.status).toBe(200);
      const [record] = await takeSettlements(stack.stack, 1);
      expect(record).toMatchObject({
        endpoint: 'embeddings',
        model: 'svc-embed',
        provider: 'sim-b',
        outcome: 'success',
        usage: { promptTokens: 1, source: 'upstream' },
        cost: NANO_PER_TOKEN,
      });
      expect(record?.attempts.map((a) => a.outcome)).toEqual(['overloaded', 'overloaded', 'ok']);
    } finally {
      await stack.stop();
    }
  });
});
