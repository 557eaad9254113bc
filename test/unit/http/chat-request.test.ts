import { describe, expect, it } from 'vitest';
import { parseChatRequest } from '#http/schemas/chat-completions.ts';
import { refusal } from '#test/refusal.ts';

const valid = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

const rejection = (body: unknown) => refusal(parseChatRequest, body);

describe('the chat completions whitelist', () => {
  it('accepts every parameter of spec §4', () => {
    const body = {
      ...valid,
      stream: true,
      max_tokens: 10,
      temperature: 1.5,
      top_p: 0.9,
      stop: ['\n'],
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      response_format: { type: 'json_object' },
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
      tool_choice: 'auto',
      seed: 7,
      n: 2,
      stream_options: { include_usage: true },
    };
    expect(parseChatRequest(body)).toEqual(body);
  });

  it.each([
    'thinking',
    'reasoning_effort',
    'max_completion_tokens',
    'logprobs',
    'user',
    'parallel_tool_calls',
  ])('refuses %s with a 400 naming it', (param) => {
    const error = rejection({ ...valid, [param]: 'x' });
    expect(error.status).toBe(400);
    expect(error.code).toBe('unsupported_parameter');
    expect(error.param).toBe(param);
    expect(error.message).toContain(param);
  });

  it('treats null as "not given", as OpenAI does', () => {
    expect(parseChatRequest({ ...valid, temperature: null, stop: null })).toEqual(valid);
  });

  it('names a missing required parameter', () => {
    expect(rejection({ messages: valid.messages })).toMatchObject({
      code: 'missing_required_parameter',
      param: 'model',
    });
    expect(rejection({ model: 'm' })).toMatchObject({
      code: 'missing_required_parameter',
      param: 'messages',
    });
  });
});

describe('types and ranges', () => {
  it.each([
    ['temperature', 2.01],
    ['temperature', -0.1],
    ['top_p', 1.5],
    ['presence_penalty', 3],
    ['n', 0],
    ['n', 9],
    ['max_tokens', 0],
    ['max_tokens', 1.5],
    ['seed', 'x'],
    ['stream', 'yes'],
  ])('refuses %s = %j, naming it', (param, value) => {
    expect(rejection({ ...valid, [param]: value }).param).toBe(param);
  });

  it('tells a parameter of the wrong type from a missing one', () => {
    expect(rejection({ ...valid, stream: 'yes' })).toMatchObject({
      code: 'invalid_type',
      param: 'stream',
      message: "Invalid type for 'stream': expected a boolean, but got a string instead.",
    });
    expect(rejection({ ...valid, stream_options: { include_usage: 1 } })).toMatchObject({
      code: 'invalid_type',
      param: 'stream_options.include_usage',
      message:
        "Invalid type for 'stream_options.include_usage': expected a boolean, but got an integer instead.",
    });
    // A schema's own wording is kept; the code still says it is the type that is wrong.
    expect(rejection({ ...valid, messages: 'hi' })).toMatchObject({
      code: 'invalid_type',
      param: 'messages',
      message: "Invalid value for 'messages': must be an array of messages",
    });
    for (const [param, value] of [
      ['model', 7],
      ['seed', 'x'],
      ['max_tokens', 1.5],
    ] as const)
      expect(rejection({ ...valid, [param]: value })).toMatchObject({ code: 'invalid_type', param });
  });

  it('refuses a body that is not a JSON object, saying what it is', () => {
    expect(rejection([])).toMatchObject({
      code: 'invalid_type',
      param: null,
      message: 'The request body must be a JSON object, but got an array instead.',
    });
    expect(rejection(null).message).toBe('The request body must be a JSON object, but got null instead.');
    expect(rejection('hi').message).toBe('The request body must be a JSON object, but got a string instead.');
  });

  it('accepts the temperature bounds 0 and 2', () => {
    expect(parseChatRequest({ ...valid, temperature: 0 }).temperature).toBe(0);
    expect(parseChatRequest({ ...valid, temperature: 2 }).temperature).toBe(2);
  });

  it('refuses an unknown field inside stream_options', () => {
    expect(
      rejection({ ...valid, stream: true, stream_options: { include_usage: true, extra: 1 } }).param,
    ).toBe('stream_options.extra');
  });

  it('refuses stream_options on a call that does not stream, as OpenAI does; a null is not given', () => {
    for (const stream of [undefined, false, null]) {
      expect(rejection({ ...valid, stream, stream_options: { include_usage: true } })).toMatchObject({
        status: 400,
        code: 'invalid_value',
        param: 'stream_options',
        message: "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
      });
    }
    expect(parseChatRequest({ ...valid, stream_options: null })).toEqual(valid);
  });
});

describe('messages', () => {
  it('accepts system, user, assistant (with tool calls) and tool results', () => {
    const messages = [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: [{ type: 'text', text: 'weather?' }] },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    ];
    expect(parseChatRequest({ ...valid, messages }).messages).toHaveLength(4);
  });

  it('refuses an unknown role, naming the message', () => {
    const error = rejection({ ...valid, messages: [{ role: 'wizard', content: 'x' }] });
    expect(error.param).toBe('messages[0].role');
  });

  it('refuses a tool result without tool_call_id', () => {
    expect(rejection({ ...valid, messages: [{ role: 'tool', content: 'x' }] }).param).toBe(
      'messages[0].tool_call_id',
    );
  });

  it('refuses an assistant message with neither content nor tool calls', () => {
    expect(rejection({ ...valid, messages: [{ role: 'assistant' }] }).param).toBe('messages[0].content');
  });

  it('refuses content that is neither text nor parts', () => {
    expect(rejection({ ...valid, messages: [{ role: 'user', content: 42 }] }).param).toBe(
      'messages[0].content',
    );
  });

  it('refuses an empty message list', () => {
    expect(rejection({ ...valid, messages: [] }).param).toBe('messages');
  });

  it('refuses a non-object body', () => {
    expect(rejection([1, 2]).status).toBe(400);
  });
});

describe('assistant history', () => {
  it('accepts an assistant message exactly as a completion returned it, dropping its annotations', () => {
    const returned = { role: 'assistant', content: 'hi', refusal: null, annotations: [] };
    const request = parseChatRequest({ ...valid, messages: [...valid.messages, returned] });
    expect(request.messages[1]).toEqual({ role: 'assistant', content: 'hi', refusal: null });
  });
});
