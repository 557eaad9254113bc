import { describe, expect, it } from 'vitest';
import {
  billableChatUsage,
  type ChatRequest,
  DEFAULT_MAX_TOKENS,
  DEFAULT_TEMPERATURE,
  IMAGE_TOKEN_ESTIMATE,
  inClientIndices,
  LANGUAGE_SYSTEM_MESSAGE,
  prepareChat,
  promptCeiling,
  temperatureIsDefault,
  upstreamChatBody,
} from '#core/chat.ts';
import { InvalidRequestError } from '#core/errors.ts';
import { chatModel, deployment, wordCounter } from '#test/fixtures.ts';

const request = (overrides: Partial<ChatRequest> = {}): ChatRequest => ({
  model: 'famA-test',
  messages: [{ role: 'user', content: 'hello there' }],
  ...overrides,
});

describe('the auto-language rule (spec §4 rule 2)', () => {
  const auto = chatModel({ id: 'svc-auto', flags: { autoLanguage: true } });

  it('adds the language system message first when an auto model gets no system message', () => {
    const prepared = prepareChat(request(), auto, wordCounter);
    expect(prepared.messages[0]).toEqual({ role: 'system', content: LANGUAGE_SYSTEM_MESSAGE });
    expect(prepared.messages.slice(1)).toEqual(request().messages);
  });

  it('leaves the messages alone when the client sent a system message', () => {
    const messages: ChatRequest['messages'] = [
      { role: 'user', content: 'hi' },
      { role: 'system', content: 'be brief' },
    ];
    expect(prepareChat(request({ messages }), auto, wordCounter).messages).toBe(messages);
  });

  it('never adds it for other models', () => {
    expect(prepareChat(request(), chatModel(), wordCounter).messages).toEqual(request().messages);
  });

  it("puts an upstream's refusal of the longer list back in the client's indices", () => {
    const added = prepareChat(request(), auto, wordCounter);
    const refusal = new InvalidRequestError('messages[1] and messages[12]: bad; messages[0] too', 'bad', {
      param: 'messages[1].content[0]',
      headers: { 'x-a': '1' },
    });
    const mapped = inClientIndices(refusal, added) as InvalidRequestError;
    expect(mapped).toBeInstanceOf(InvalidRequestError);
    // Our own message (index 0 of the list the upstream saw) keeps its index: the client has none for it.
    expect(mapped.toJSON().error).toEqual({
      message: 'messages[0] and messages[11]: bad; messages[0] too',
      type: 'invalid_request_error',
      param: 'messages[0].content[0]',
      code: 'bad',
    });
    expect(mapped.headers).toEqual({ 'x-a': '1' });
    // Nothing added, or not a refusal: the same error.
    expect(inClientIndices(refusal, prepareChat(request(), chatModel(), wordCounter))).toBe(refusal);
    const fault = new Error('messages[1]');
    expect(inClientIndices(fault, added)).toBe(fault);
  });
});

describe('what a usage report can bill', () => {
  const usage = (promptTokens: number, completionTokens: number, cachedPromptTokens = 0) => ({
    promptTokens,
    completionTokens,
    cachedPromptTokens,
    reasoningTokens: 0,
    source: 'upstream' as const,
  });

  it('bills a report within the limits as it came, the same object', () => {
    const prepared = prepareChat(request({ max_tokens: 50 }), chatModel(), wordCounter);
    // A provider's tokenizer may count more than ours: more prompt than our estimate is still billed.
    const report = usage(prepared.promptTokens + 40, 50);
    expect(billableChatUsage(prepared, report)).toBe(report);
  });

  it('holds a text prompt to twice the bytes it sends plus a template allowance, never below our estimate', () => {
    const prepared = prepareChat(request({ max_tokens: 50 }), chatModel(), wordCounter);
    // Everything a template can render, as JSON: 54 bytes; 4096 for the template.
    const sent = '{"messages":[{"role":"user","content":"hello there"}]}';
    const ceiling = 4096 + 2 * sent.length;
    expect(promptCeiling(prepared)).toBe(ceiling);
    expect(billableChatUsage(prepared, usage(1_000_000_000, 10, 1_000_000_000))).toMatchObject({
      promptTokens: ceiling,
      cachedPromptTokens: ceiling,
      completionTokens: 10,
    });
    // A small context window bounds it further.
    const small = prepareChat(request({ max_tokens: 50 }), chatModel({ contextWindow: 100 }), wordCounter);
    expect(promptCeiling(small)).toBe(100);
  });

  it('counts what a template may render beyond the text we estimate: tool call ids, the tool choice', () => {
    const plain = prepareChat(request({ max_tokens: 50 }), chatModel(), wordCounter);
    const id = 'call_'.padEnd(20_000, 'x');
    const withTool = prepareChat(
      request({
        max_tokens: 50,
        messages: [
          { role: 'user', content: 'hello there' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id, type: 'function', function: { name: 'f', arguments: '{}' } }],
          },
          { role: 'tool', tool_call_id: id, content: 'ok' },
        ],
      }),
      chatModel({ contextWindow: 1_000_000 }),
      wordCounter,
    );
    expect(promptCeiling(withTool)).toBeGreaterThan(promptCeiling(plain) + 4 * 20_000);
  });

  it('holds a prompt with an image to the context window only: an image’s tokens have no byte bound', () => {
    const prepared = prepareChat(
      request({
        max_tokens: 50,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }],
      }),
      chatModel({ contextWindow: 200_000, flags: { multimodal: true } }),
      wordCounter,
    );
    expect(promptCeiling(prepared)).toBe(200_000);
    expect(billableChatUsage(prepared, usage(5_000, 10)).promptTokens).toBe(5_000);
  });
});

describe('image input', () => {
  const withImage = request({
    messages: [
      { role: 'system', content: 'x' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image_url', image_url: { url: 'data:,' } },
        ],
      },
    ],
  });

  it('is refused on a text-only model, naming the part', () => {
    expect(() => prepareChat(withImage, chatModel(), wordCounter)).toThrow(
      expect.objectContaining({ status: 400, param: 'messages[1].content[1]', code: 'invalid_value' }),
    );
  });

  it('is accepted on a multimodal model and estimated generously', () => {
    const prepared = prepareChat(withImage, chatModel({ flags: { multimodal: true } }), wordCounter);
    // 3 priming + 2 × 3 per message + "x" + "look" + one image
    expect(prepared.promptTokens).toBe(3 + 6 + 1 + 1 + IMAGE_TOKEN_ESTIMATE);
  });
});

describe('the prompt estimate', () => {
  /** One token per character: every character of what the upstream renders shows in the estimate. */
  const perCharacter = { count: (text: string) => text.length, countUpTo: (text: string) => text.length };
  const schema = { name: 'weather', schema: { type: 'object', properties: { city: { type: 'string' } } } };

  it('counts a json_schema response format, which the upstream renders into the prompt', () => {
    const plain = prepareChat(request(), chatModel(), perCharacter).promptTokens;
    const structured = prepareChat(
      request({ response_format: { type: 'json_schema', json_schema: schema } }),
      chatModel(),
      perCharacter,
    ).promptTokens;
    expect(structured - plain).toBe(JSON.stringify(schema).length);
    // A plain JSON mode carries no schema.
    expect(
      prepareChat(request({ response_format: { type: 'json_object' } }), chatModel(), perCharacter)
        .promptTokens,
    ).toBe(plain);
  });
});

describe('the completion cap', () => {
  it('is the client max_tokens when it fits the context window', () => {
    expect(prepareChat(request({ max_tokens: 100 }), chatModel(), wordCounter).maxTokens).toBe(100);
  });

  it('defaults to DEFAULT_MAX_TOKENS, or what is left of the context window', () => {
    expect(prepareChat(request(), chatModel(), wordCounter).maxTokens).toBe(DEFAULT_MAX_TOKENS);
    const small = chatModel({ contextWindow: 100 });
    const prepared = prepareChat(request(), small, wordCounter);
    expect(prepared.maxTokens).toBe(100 - prepared.promptTokens);
  });

  it('follows a model-specific default', () => {
    const big = chatModel({ contextWindow: 1_048_576, defaultMaxTokens: 16_384 });
    expect(prepareChat(request(), big, wordCounter).maxTokens).toBe(16_384);
  });

  it('refuses a request that cannot fit the context window with context_length_exceeded', () => {
    const error = (() => {
      try {
        prepareChat(request({ max_tokens: 9_999 }), chatModel(), wordCounter);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(InvalidRequestError);
    expect(error).toMatchObject({ status: 400, code: 'context_length_exceeded' });
  });
});

describe('the prompt estimate', () => {
  /** Counts words, and records every text it is asked to count with the limit it was given. */
  const recordingCounter = () => {
    const asked: [string, number][] = [];
    return {
      asked,
      count: (text: string) => {
        asked.push([text, Number.POSITIVE_INFINITY]);
        return wordCounter.count(text);
      },
      countUpTo: (text: string, limit: number) => {
        asked.push([text, limit]);
        return wordCounter.count(text);
      },
    };
  };
  const hundredWords = (i: number) => `m${i} ${'word '.repeat(99)}`.trim();

  it('stops counting once the messages are past the context window, and says the count is a lower bound', () => {
    const counter = recordingCounter();
    const messages = Array.from({ length: 10 }, (_, i) => ({
      role: 'user' as const,
      content: hundredWords(i),
    }));
    const error = (() => {
      try {
        prepareChat(request({ messages }), chatModel({ contextWindow: 250 }), counter);
      } catch (e) {
        return e;
      }
    })();
    // Priming 3, then 3 + 100 per message: past 250 in the third message; the other seven are never read.
    expect(counter.asked.map(([text, limit]) => [text.slice(0, 3), limit])).toEqual([
      ['m0 ', 244],
      ['m1 ', 141],
      ['m2 ', 38],
    ]);
    expect(error).toMatchObject({ status: 400, code: 'context_length_exceeded', param: 'messages' });
    expect((error as Error).message).toBe(
      "This model's maximum context length is 250 tokens, but the messages take at least 312.",
    );
  });

  it('counts every text exactly, tools and schema included, while they fit', () => {
    const counter = recordingCounter();
    const tools = [
      { type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object' } } },
    ];
    const prepared = prepareChat(
      request({ messages: [{ role: 'user', content: hundredWords(0) }], tools, max_tokens: 10 }),
      chatModel({ contextWindow: 1_000 }),
      counter,
    );
    expect(prepared.promptTokens).toBe(3 + 3 + 100 + wordCounter.count(JSON.stringify(tools)));
    expect(counter.asked.map(([, limit]) => limit)).toEqual([994, 894]);
  });

  it('counts without a bound for a model without a context window', () => {
    const counter = recordingCounter();
    prepareChat(request(), chatModel({ contextWindow: undefined }), counter);
    expect(counter.asked).toEqual([['hello there', Number.POSITIVE_INFINITY]]);
  });
});

describe('the upstream body', () => {
  it('carries the deployment model, the default temperature and the cap', () => {
    const prepared = prepareChat(request(), chatModel(), wordCounter);
    const body = upstreamChatBody(prepared, deployment());
    expect(body).toMatchObject({
      model: 'upstream-model',
      temperature: DEFAULT_TEMPERATURE,
      max_tokens: DEFAULT_MAX_TOKENS,
    });
    expect(body).not.toHaveProperty('stream_options');
  });

  it('sends the cap as max_completion_tokens to a deployment that asks for it (OpenAI reasoning models)', () => {
    const prepared = prepareChat(request({ max_tokens: 300 }), chatModel(), wordCounter);
    const body = upstreamChatBody(prepared, {
      ...deployment(),
      completionCapParam: 'max_completion_tokens',
    });
    expect(body.max_completion_tokens).toBe(300);
    expect(body).not.toHaveProperty('max_tokens');
  });

  it('leaves out the fields a deployment says its upstream refuses, our default temperature included', () => {
    const refuses = deployment({ omitParams: ['temperature', 'top_p', 'stop'] });
    const defaulted = upstreamChatBody(prepareChat(request(), chatModel(), wordCounter), refuses);
    expect(defaulted).not.toHaveProperty('temperature');
    const given = prepareChat(
      request({ temperature: 0.2, top_p: 0.9, stop: ['END'], seed: 7, presence_penalty: 0.5 }),
      chatModel(),
      wordCounter,
    );
    const body = upstreamChatBody(given, refuses);
    expect(body).not.toHaveProperty('temperature');
    expect(body).not.toHaveProperty('top_p');
    expect(body).not.toHaveProperty('stop');
    // Fields the deployment did not name still go.
    expect(body).toMatchObject({ seed: 7, presence_penalty: 0.5, max_tokens: expect.any(Number) });
    expect(upstreamChatBody(given, deployment())).toMatchObject({
      temperature: 0.2,
      top_p: 0.9,
      stop: ['END'],
    });
  });

  it('tells an adapter whether the temperature is our default, while still sending it', () => {
    const defaulted = upstreamChatBody(
      prepareChat(request({ top_p: 0.9 }), chatModel(), wordCounter),
      deployment(),
    );
    // OpenAI-compatible deployments get what they always did.
    expect(defaulted).toMatchObject({ temperature: DEFAULT_TEMPERATURE, top_p: 0.9 });
    expect(temperatureIsDefault(defaulted)).toBe(true);
    const given = prepareChat(
      request({ temperature: DEFAULT_TEMPERATURE, top_p: 0.9 }),
      chatModel(),
      wordCounter,
    );
    expect(temperatureIsDefault(upstreamChatBody(given, deployment()))).toBe(false);
  });

  it('keeps the client temperature, including 0', () => {
    const prepared = prepareChat(request({ temperature: 0 }), chatModel(), wordCounter);
    expect(upstreamChatBody(prepared, deployment()).temperature).toBe(0);
  });

  it('forces include_usage upstream for streams even when the client did not ask (rule 4)', () => {
    const prepared = prepareChat(request({ stream: true }), chatModel(), wordCounter);
    expect(prepared.clientWantsUsage).toBe(false);
    expect(upstreamChatBody(prepared, deployment()).stream_options).toEqual({ include_usage: true });
  });

  it('adds reasoning parameters only for reasoning-tier models (rule 1)', () => {
    const reasoningDeployment = deployment({ reasoningParams: { reasoning_effort: 'medium' } });
    const plain = prepareChat(request(), chatModel(), wordCounter);
    const reasoning = prepareChat(request(), chatModel({ flags: { reasoning: true } }), wordCounter);
    expect(upstreamChatBody(plain, reasoningDeployment)).not.toHaveProperty('reasoning_effort');
    expect(upstreamChatBody(reasoning, reasoningDeployment).reasoning_effort).toBe('medium');
  });
});
