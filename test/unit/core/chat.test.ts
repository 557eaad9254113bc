import { describe, expect, it } from 'vitest';
import {
  type ChatRequest,
  DEFAULT_MAX_TOKENS,
  DEFAULT_TEMPERATURE,
  IMAGE_TOKEN_ESTIMATE,
  LANGUAGE_SYSTEM_MESSAGE,
  prepareChat,
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
