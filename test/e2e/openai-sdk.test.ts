import OpenAI from 'openai';
import { zodFunction } from 'openai/helpers/zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startTestStack, type TestStack } from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack();
});
afterAll(() => t?.stop());

const messages = [{ role: 'user' as const, content: 'Say something short.' }];

describe('the official openai SDK, changing only base URL and key', () => {
  it('gets a non-stream completion with usage', async () => {
    const completion = await t.openai().chat.completions.create({ model: 'famA-v4.1-flash', messages });
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('famA-v4.1-flash');
    expect(completion.choices[0]?.message.role).toBe('assistant');
    expect(completion.choices[0]?.message.content?.length).toBeGreaterThan(0);
    expect(completion.usage?.total_tokens).toBe(
      (completion.usage?.prompt_tokens ?? 0) + (completion.usage?.completion_tokens ?? 0),
    );
  });

  it('streams a completion without a usage chunk when include_usage is not set', async () => {
    const stream = await t
      .openai()
      .chat.completions.create({ model: 'famA-v4.1-flash', messages, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks.every((c) => c.usage === undefined || c.usage === null)).toBe(true);
    expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop');
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    const whole = await t.openai().chat.completions.create({ model: 'famA-v4.1-flash', messages });
    expect(text).toBe(whole.choices[0]?.message.content);
  });

  it('streams a final usage chunk when include_usage is set', async () => {
    const stream = await t.openai().chat.completions.create({
      model: 'famA-v4.1-flash',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    expect(last?.usage?.completion_tokens).toBe(chunks.filter((c) => c.choices[0]?.delta.content).length);
    expect(last?.usage?.prompt_tokens).toBeGreaterThan(0);
  });

  it('maps a non-whitelisted parameter to BadRequestError naming it', async () => {
    const error = await t
      .openai()
      .chat.completions.create({ model: 'famA-v4.1-flash', messages, reasoning_effort: 'high' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('reasoning_effort');
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('unsupported_parameter');
  });

  it('maps a bad key to AuthenticationError', async () => {
    const error = await t
      .openai({ apiKey: 'svc_live_thisKeyDoesNotExist000000000' })
      .chat.completions.create({ model: 'famA-v4.1-flash', messages })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((error as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe('invalid_api_key');
  });

  it('maps an unknown model to NotFoundError', async () => {
    const error = await t
      .openai()
      .chat.completions.create({ model: 'famZ-does-not-exist', messages })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect((error as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
  });

  it('maps every deployment overloaded to RateLimitError with engine_overloaded', async () => {
    t.simulator.setFaults('sim-a', { error: 'overloaded' });
    t.simulator.setFaults('sim-b', { error: 'overloaded' });
    try {
      const error = await t
        .openai()
        .chat.completions.create({ model: 'famA-v4.1-flash', messages })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.RateLimitError);
      const rateLimit = error as InstanceType<typeof OpenAI.RateLimitError>;
      expect(rateLimit.code).toBe('engine_overloaded');
      expect(rateLimit.type).toBe('invalid_request_error');
      expect(rateLimit.param).toBeNull();
      expect(rateLimit.message).toMatch(/busy.*retry later/i);
    } finally {
      t.simulator.resetFaults();
    }
  });

  it('maps upstream faults on every deployment to InternalServerError', async () => {
    t.simulator.setFaults('sim-a', { error: 'server_error' });
    t.simulator.setFaults('sim-b', { error: 'drop_before' });
    try {
      const error = await t
        .openai()
        .chat.completions.create({ model: 'famA-v4.1-flash', messages })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.InternalServerError);
      expect((error as InstanceType<typeof OpenAI.InternalServerError>).status).toBe(500);
      expect((error as InstanceType<typeof OpenAI.InternalServerError>).type).toBe('server_error');
    } finally {
      t.simulator.resetFaults();
    }
  });
});

describe("the openai SDK's helpers, whose messages go back as history", () => {
  it('runs a tool turn with a zod tool through stream().finalChatCompletion(), and takes the message back', async () => {
    const tools = [zodFunction({ name: 'get_time', parameters: z.object({}) })];
    const final = await t
      .openai()
      .chat.completions.stream({ model: 'famB-5.3-flash', messages, tools, tool_choice: 'required' })
      .finalChatCompletion();
    const message = final.choices[0]?.message;
    const call = message?.tool_calls?.[0];
    // The helper adds what it parsed to the call; it must not cost the next turn a 400.
    expect(call?.type === 'function' && 'parsed_arguments' in call.function).toBe(true);
    const next = await t.openai().chat.completions.create({
      model: 'famB-5.3-flash',
      tools,
      messages: [
        ...messages,
        message as NonNullable<typeof message>,
        { role: 'tool', tool_call_id: call?.id ?? '', content: '12:00' },
      ],
    });
    expect(next.choices[0]?.message.role).toBe('assistant');
  });
});
