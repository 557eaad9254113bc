import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack();
});
afterAll(() => t?.stop());

describe('the Vercel AI SDK (@ai-sdk/openai-compatible)', () => {
  const provider = () =>
    createOpenAICompatible({ name: 'svc', baseURL: t.baseURL, apiKey: t.apiKey, includeUsage: true });

  it('streams text, with usage, that matches the non-stream reply', async () => {
    const prompt = 'Tell me about the sea.';
    const result = streamText({ model: provider()('famB-5.3-flash'), prompt, temperature: 0.2 });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    expect(text.length).toBeGreaterThan(0);
    const usage = await result.usage;
    expect(usage.outputTokens).toBeGreaterThan(0);
    const whole = await generateText({ model: provider()('famB-5.3-flash'), prompt, temperature: 0.2 });
    expect(text).toBe(whole.text);
  });

  it('surfaces a broken stream as an error', async () => {
    t.simulator.setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 3 });
    try {
      const errors: unknown[] = [];
      const result = streamText({
        model: provider()('famB-5.3-flash'),
        prompt: 'x',
        maxRetries: 0,
        onError: ({ error }) => {
          errors.push(error);
        },
      });
      for await (const _ of result.textStream) {
        // consume
      }
      expect(errors).toHaveLength(1);
    } finally {
      t.simulator.resetFaults();
    }
  });
});
