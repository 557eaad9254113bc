import { encode } from 'gpt-tokenizer';
import { describe, expect, test } from 'vitest';
import { REASONING_TOKENS, TOOL_CALL_COMPLETION_TOKENS } from '#sim/chat.ts';
import { countPromptTokens } from '#sim/tokens.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { postChat, readSse, userChat } from './client.ts';
import { useSimulator } from './use-simulator.ts';

const CACHING_MODEL = 'gpt-4o-cached';

const sim = useSimulator({ promptCachingModels: [CACHING_MODEL] });

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number; audio_tokens: number };
  completion_tokens_details?: { reasoning_tokens: number };
}

interface ToolCall {
  id: string;
  type: string;
  function: { name: string; arguments: string };
}

interface Completion {
  id: string;
  object: string;
  model: string;
  system_fingerprint: string;
  choices: Array<{
    index: number;
    message: { role: string; content: string | null; tool_calls?: ToolCall[] };
    finish_reason: string;
  }>;
  usage: Usage;
}

interface ToolCallDelta {
  index: number;
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
}

interface Chunk {
  id: string;
  created: number;
  choices: Array<{
    index: number;
    delta: { role?: string; content?: string | null; tool_calls?: ToolCallDelta[] };
    finish_reason: string | null;
  }>;
  usage?: Usage | null;
}

async function complete(body: unknown, headers?: Record<string, string>): Promise<Completion> {
  const response = await postChat(sim().url, body, { headers });
  expect(response.status).toBe(200);
  const completion = (await response.json()) as Completion;
  expect(schemaErrors('CreateChatCompletionResponse', completion)).toBe('');
  return completion;
}

async function stream(body: Record<string, unknown>, headers?: Record<string, string>) {
  const response = await postChat(sim().url, { ...body, stream: true }, { headers });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('text/event-stream');
  expect(response.headers.get('cache-control')).toBe('no-cache');
  const { data, error } = await readSse(response);
  expect(error).toBeNull();
  expect(data.at(-1)).toBe('[DONE]');
  const chunks = data.slice(0, -1).map((payload) => JSON.parse(payload) as Chunk);
  for (const chunk of chunks) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
  return chunks;
}

/** Concatenates the content deltas of one choice, as a client assembling a stream would. */
function streamedText(chunks: Chunk[], index = 0): string {
  return chunks
    .flatMap((chunk) => chunk.choices)
    .filter((choice) => choice.index === index)
    .map((choice) => choice.delta.content ?? '')
    .join('');
}

describe('non-streamed chat completions', () => {
  test('return an OpenAI-shaped completion whose usage counts exactly the tokens of its text', async () => {
    const body = userChat('Tell me something.');
    const response = await postChat(sim().url, body);
    expect(response.headers.get('content-type')).toBe('application/json');
    const completion = (await response.json()) as Completion;
    expect(schemaErrors('CreateChatCompletionResponse', completion)).toBe('');
    expect(completion.id).toMatch(/^chatcmpl-[0-9a-f]+$/);
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('gpt-4o-mini');
    expect(completion.system_fingerprint).toBe('fp_sim');
    const [choice] = completion.choices;
    expect(choice?.message).toEqual({
      role: 'assistant',
      content: expect.any(String),
      refusal: null,
      annotations: [],
    });
    expect(choice?.finish_reason).toBe('stop');
    const content = choice?.message.content ?? '';
    expect(completion.usage.completion_tokens).toBe(encode(content).length);
    expect(completion.usage.completion_tokens).toBeGreaterThanOrEqual(8);
    expect(completion.usage.completion_tokens).toBeLessThanOrEqual(31);
    expect(completion.usage.prompt_tokens).toBe(countPromptTokens(body));
    expect(completion.usage.total_tokens).toBe(
      completion.usage.prompt_tokens + completion.usage.completion_tokens,
    );
    expect(completion.usage).not.toHaveProperty('prompt_tokens_details');
    expect(completion.usage).not.toHaveProperty('completion_tokens_details');
  });

  test('return the same text for the same request, and different text for a different seed', async () => {
    const first = await complete(userChat('Same question', { seed: 1 }));
    const second = await complete(userChat('Same question', { seed: 1 }));
    const reseeded = await complete(userChat('Same question', { seed: 2 }));
    expect(second.choices[0]?.message.content).toBe(first.choices[0]?.message.content);
    expect(reseeded.choices[0]?.message.content).not.toBe(first.choices[0]?.message.content);
  });

  test('stop at max_tokens with finish_reason length', async () => {
    const completion = await complete(userChat('Be long.', { max_tokens: 3 }));
    expect(completion.choices[0]?.finish_reason).toBe('length');
    expect(completion.usage.completion_tokens).toBe(3);
    expect(encode(completion.choices[0]?.message.content ?? '').length).toBe(3);
  });

  test('truncate to a prefix of the natural text when capped by max_completion_tokens', async () => {
    const natural = await complete(userChat('Prefix check'));
    const capped = await complete(userChat('Prefix check', { max_completion_tokens: 4 }));
    const words = (natural.choices[0]?.message.content ?? '').split(' ');
    expect(capped.choices[0]?.message.content).toBe(words.slice(0, 4).join(' '));
  });

  test('finish with stop when max_tokens exceeds the natural length', async () => {
    const completion = await complete(userChat('Short please.', { max_tokens: 1000 }));
    expect(completion.choices[0]?.finish_reason).toBe('stop');
  });

  test('produce exactly the number of tokens forced by x-sim-completion-tokens', async () => {
    const completion = await complete(userChat('Exact', { max_tokens: 2 }), {
      'x-sim-completion-tokens': '50',
    });
    expect(completion.usage.completion_tokens).toBe(50);
    expect(encode(completion.choices[0]?.message.content ?? '').length).toBe(50);
    expect(completion.choices[0]?.finish_reason).toBe('stop');
  });

  test('return n choices with their own text and usage summed across them', async () => {
    const completion = await complete(userChat('Two answers', { n: 2 }));
    expect(completion.choices.map((choice) => choice.index)).toEqual([0, 1]);
    const [a, b] = completion.choices.map((choice) => choice.message.content ?? '');
    expect(a).not.toBe(b);
    expect(completion.usage.completion_tokens).toBe(encode(a ?? '').length + encode(b ?? '').length);
  });

  test('call the first tool when tool_choice is required', async () => {
    const tools = [
      { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } },
      { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
    ];
    const completion = await complete(userChat('Weather?', { tools, tool_choice: 'required' }));
    const [choice] = completion.choices;
    expect(choice?.finish_reason).toBe('tool_calls');
    expect(choice?.message.content).toBeNull();
    expect(choice?.message.tool_calls).toEqual([
      {
        id: expect.stringMatching(/^call_[0-9a-f]+$/),
        type: 'function',
        function: { name: 'get_weather', arguments: '{}' },
      },
    ]);
    expect(completion.usage.completion_tokens).toBe(TOOL_CALL_COMPLETION_TOKENS);
    expect(completion.usage.prompt_tokens).toBe(countPromptTokens(userChat('Weather?', { tools })));
  });

  test('call the named function when tool_choice forces one', async () => {
    const tools = [
      { type: 'function', function: { name: 'get_weather' } },
      { type: 'function', function: { name: 'get_time' } },
    ];
    const completion = await complete(
      userChat('Time?', { tools, tool_choice: { type: 'function', function: { name: 'get_time' } } }),
    );
    expect(completion.choices[0]?.message.tool_calls?.[0]?.function.name).toBe('get_time');
  });

  test('answer with text when tools are offered but not forced', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather' } }];
    const completion = await complete(userChat('Hello', { tools, tool_choice: 'auto' }));
    expect(completion.choices[0]?.finish_reason).toBe('stop');
    expect(typeof completion.choices[0]?.message.content).toBe('string');
  });

  test('answer with a JSON object when a JSON response format is requested', async () => {
    for (const type of ['json_object', 'json_schema']) {
      const completion = await complete(userChat('JSON please', { response_format: { type } }));
      const content = completion.choices[0]?.message.content ?? '';
      expect(JSON.parse(content)).toEqual({ answer: expect.stringMatching(/^[a-z]+( [a-z]+)*$/) });
      expect(completion.usage.completion_tokens).toBe(encode(content).length);
    }
  });

  test('report 16 hidden reasoning tokens when reasoning_effort is set', async () => {
    const completion = await complete(userChat('Think', { reasoning_effort: 'low' }));
    const visible = encode(completion.choices[0]?.message.content ?? '').length;
    expect(completion.usage.completion_tokens_details?.reasoning_tokens).toBe(REASONING_TOKENS);
    expect(completion.usage.completion_tokens).toBe(visible + REASONING_TOKENS);
  });

  test('count reasoning tokens against max_tokens, as reasoning upstreams do', async () => {
    const capped = await complete(userChat('Think', { reasoning_effort: 'low', max_tokens: 20 }));
    expect(capped.usage.completion_tokens).toBe(20);
    expect(capped.usage.completion_tokens_details?.reasoning_tokens).toBe(REASONING_TOKENS);
    expect(capped.choices[0]?.finish_reason).toBe('length');
    // A cap under the reasoning budget leaves no visible answer at all.
    const tiny = await complete(userChat('Think', { reasoning_effort: 'low', max_tokens: 5 }));
    expect(tiny.usage.completion_tokens).toBe(5);
    expect(tiny.choices[0]?.message.content).toBe('');
  });

  test('accept multimodal content parts and count 85 tokens per image', async () => {
    const body = {
      model: 'gpt-4o',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Describe' },
            { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
          ],
        },
      ],
    };
    const completion = await complete(body);
    expect(completion.usage.prompt_tokens).toBe(encode('Describe').length + 85 + 3 + 3);
  });
});

describe('streamed chat completions', () => {
  test('stream deltas that concatenate to the non-streamed text of the same request', async () => {
    const body = userChat('Stream this', { seed: 7 });
    const whole = await complete(body);
    const chunks = await stream(body);
    expect(streamedText(chunks)).toBe(whole.choices[0]?.message.content);
  });

  test('open with an assistant role delta, send one delta per token and close with a finish_reason', async () => {
    const chunks = await stream(userChat('Shape'), { 'x-sim-completion-tokens': '3' });
    expect(chunks.map((chunk) => chunk.choices[0]?.delta)).toEqual([
      { role: 'assistant', content: '' },
      { content: expect.stringMatching(/^[a-z]+$/) },
      { content: expect.stringMatching(/^ [a-z]+$/) },
      { content: expect.stringMatching(/^ [a-z]+$/) },
      {},
    ]);
    expect(chunks.map((chunk) => chunk.choices[0]?.finish_reason)).toEqual([null, null, null, null, 'stop']);
    expect(new Set(chunks.map((chunk) => chunk.id)).size).toBe(1);
    expect(new Set(chunks.map((chunk) => chunk.created)).size).toBe(1);
  });

  test('omit usage entirely unless include_usage is requested', async () => {
    const chunks = await stream(userChat('No usage'));
    for (const chunk of chunks) {
      expect(chunk).not.toHaveProperty('usage');
      expect(chunk.choices).toHaveLength(1);
    }
  });

  test('with include_usage, send usage null on every chunk and a final usage chunk without choices', async () => {
    const body = userChat('With usage', { stream_options: { include_usage: true } });
    const chunks = await stream(body);
    const last = chunks.at(-1);
    for (const chunk of chunks.slice(0, -1)) {
      expect(chunk.usage).toBeNull();
      expect(chunk.choices).toHaveLength(1);
    }
    expect(last?.choices).toEqual([]);
    const whole = await complete(userChat('With usage'));
    expect(last?.usage).toEqual(whole.usage);
    expect(last?.usage?.completion_tokens).toBe(encode(streamedText(chunks)).length);
  });

  test('stop at max_tokens with finish_reason length', async () => {
    const chunks = await stream(
      userChat('Capped', { max_tokens: 2, stream_options: { include_usage: true } }),
    );
    expect(encode(streamedText(chunks)).length).toBe(2);
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('length');
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(2);
  });

  test('stream every choice when n is 2, each matching its non-streamed text', async () => {
    const body = userChat('Two streams', { n: 2, stream_options: { include_usage: true } });
    const whole = await complete(body);
    const chunks = await stream(body);
    expect(streamedText(chunks, 0)).toBe(whole.choices[0]?.message.content);
    expect(streamedText(chunks, 1)).toBe(whole.choices[1]?.message.content);
    const finishes = chunks
      .flatMap((chunk) => chunk.choices)
      .filter((choice) => choice.finish_reason !== null);
    expect(finishes.map((choice) => choice.index)).toEqual([0, 1]);
    expect(chunks.at(-1)?.usage).toEqual(whole.usage);
  });

  test('stream a forced tool call as a name chunk followed by an arguments chunk', async () => {
    const tools = [{ type: 'function', function: { name: 'lookup' } }];
    const body = userChat('Look it up', { tools, tool_choice: 'required' });
    const whole = await complete(body);
    const chunks = await stream(body);
    const deltas = chunks.map((chunk) => chunk.choices[0]?.delta);
    const id = whole.choices[0]?.message.tool_calls?.[0]?.id;
    expect(deltas).toEqual([
      { role: 'assistant', content: null },
      { tool_calls: [{ index: 0, id, type: 'function', function: { name: 'lookup', arguments: '' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '{}' } }] },
      {},
    ]);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('tool_calls');
  });

  test('stream JSON-mode content that concatenates to the non-streamed JSON', async () => {
    const body = userChat('JSON stream', { response_format: { type: 'json_object' } });
    const whole = await complete(body);
    const chunks = await stream(body);
    expect(streamedText(chunks)).toBe(whole.choices[0]?.message.content);
  });
});

describe('prompt caching', () => {
  const longPrompt = Array.from({ length: 400 }, (_, i) => `Paragraph ${i} about caching.`).join(' ');

  test('reports cached tokens for a repeated long prompt on a caching model', async () => {
    const body = { model: CACHING_MODEL, messages: [{ role: 'user', content: longPrompt }] };
    const first = await complete(body);
    const second = await complete(body);
    const promptTokens = first.usage.prompt_tokens;
    expect(promptTokens).toBeGreaterThanOrEqual(1024);
    expect(first.usage.prompt_tokens_details).toEqual({ cached_tokens: 0, audio_tokens: 0 });
    expect(second.usage.prompt_tokens_details).toEqual({
      cached_tokens: Math.floor(promptTokens / 128) * 128,
      audio_tokens: 0,
    });
  });

  test('never reports cached tokens for prompts under 1024 tokens', async () => {
    const body = { model: CACHING_MODEL, messages: [{ role: 'user', content: 'short and repeated' }] };
    await complete(body);
    const second = await complete(body);
    expect(second.usage.prompt_tokens_details).toEqual({ cached_tokens: 0, audio_tokens: 0 });
  });

  test('reports no prompt_tokens_details at all for a model without caching', async () => {
    const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: longPrompt }] };
    await complete(body);
    const second = await complete(body);
    expect(second.usage).not.toHaveProperty('prompt_tokens_details');
  });
});

describe('request validation', () => {
  test('rejects a body that is not JSON with an OpenAI-shaped 400', async () => {
    const response = await postChat(sim().url, '{not json');
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: { message: expect.any(String), type: 'invalid_request_error', param: null, code: null },
    });
  });

  test('rejects a request without a model', async () => {
    const response = await postChat(sim().url, { messages: [{ role: 'user', content: 'hi' }] });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { type: string } };
    expect(body.error.type).toBe('invalid_request_error');
  });

  test('rejects a request without messages, naming the parameter', async () => {
    const response = await postChat(sim().url, { model: 'gpt-4o' });
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: {
        message: "Missing required parameter: 'messages'.",
        type: 'invalid_request_error',
        param: 'messages',
        code: 'missing_required_parameter',
      },
    });
  });

  test('tells messages of the wrong type from missing ones', async () => {
    const response = await postChat(sim().url, { model: 'gpt-4o', messages: 'hi' });
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: {
        message: "Invalid type for 'messages': expected an array, but got a string instead.",
        type: 'invalid_request_error',
        param: 'messages',
        code: 'invalid_type',
      },
    });
  });

  test('ignores fields it does not know', async () => {
    await complete(
      userChat('Extra fields', { temperature: 0.2, user: 'u1', metadata: { a: 'b' }, stop: ['x'] }),
    );
  });

  test('requires a bearer key', async () => {
    const response = await postChat(sim().url, userChat('hi'), { key: null });
    expect(response.status).toBe(401);
    expect(await response.json()).toEqual({
      error: {
        message: expect.any(String),
        type: 'invalid_request_error',
        param: null,
        code: 'invalid_api_key',
      },
    });
  });
});
