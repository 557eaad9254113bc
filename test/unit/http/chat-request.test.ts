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

  it.each(['thinking', 'reasoning_effort', 'logprobs', 'user', 'parallel_tool_calls'])(
    'refuses %s with a 400 naming it',
    (param) => {
      const error = rejection({ ...valid, [param]: 'x' });
      expect(error.status).toBe(400);
      expect(error.code).toBe('unsupported_parameter');
      expect(error.param).toBe(param);
      expect(error.message).toContain(param);
    },
  );

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

describe('what OpenAI accepts and the spec does not forbid', () => {
  it.each([
    ['n up to 128', { n: 128 }],
    ['a seed beyond 2^53 (an int64)', JSON.parse('{"seed":9000000000000000123}')],
    ['stream_options.include_obfuscation', { stream: true, stream_options: { include_obfuscation: false } }],
    [
      'an assistant message echoed with function_call and audio as null',
      {
        messages: [
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            content: 'hello',
            refusal: null,
            annotations: [],
            function_call: null,
            audio: null,
          },
          { role: 'user', content: 'again' },
        ],
      },
    ],
  ])('accepts %s', (_, extra) => {
    expect(() => parseChatRequest({ ...valid, ...extra })).not.toThrow();
  });

  it('passes nothing of an echoed assistant message on that says nothing', () => {
    const request = parseChatRequest({
      ...valid,
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'hello', function_call: null, audio: null },
        { role: 'user', content: 'again' },
      ],
    });
    expect(request.messages[1]).toEqual({ role: 'assistant', content: 'hello' });
  });

  it('takes back the messages SDKs hand out — `parsed` (openai helpers), `reasoning_content` (AI SDK loops) — and sends neither on', () => {
    const request = parseChatRequest({
      ...valid,
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: '{"a":1}', refusal: null, parsed: { a: 1 } },
        { role: 'user', content: 'and?' },
        { role: 'assistant', content: 'so', parsed: null, reasoning_content: 'They asked twice.' },
        { role: 'user', content: 'again' },
      ],
    });
    expect(request.messages[1]).toEqual({ role: 'assistant', content: '{"a":1}', refusal: null });
    expect(request.messages[3]).toEqual({ role: 'assistant', content: 'so' });
  });

  it('takes back a reply whose reasoning came as `reasoning` with `reasoning_details` (as some upstreams send it), without it', () => {
    const request = parseChatRequest({
      ...valid,
      messages: [
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: 'hello',
          reasoning: 'Greet back.',
          reasoning_details: [{ type: 'reasoning.text', text: 'Greet back.' }],
        },
        { role: 'user', content: 'and?' },
        { role: 'assistant', content: 'so', reasoning: null, reasoning_details: null },
        { role: 'user', content: 'again' },
      ],
    });
    expect(request.messages[1]).toEqual({ role: 'assistant', content: 'hello' });
    expect(request.messages[3]).toEqual({ role: 'assistant', content: 'so' });
    // Still typed: reasoning is text.
    expect(
      rejection({
        ...valid,
        messages: [{ role: 'assistant', content: 'x', reasoning: 1 }, ...valid.messages],
      }),
    ).toMatchObject({ param: 'messages[0].reasoning' });
  });
});

describe('which fault a body with several is refused for', () => {
  it("names a known parameter's fault before the unknown names, as the schema always did", () => {
    expect(rejection({ messages: valid.messages, thinking: 1 })).toMatchObject({
      code: 'missing_required_parameter',
      param: 'model',
    });
    expect(rejection({ ...valid, temperature: 3, thinking: 1 })).toMatchObject({ param: 'temperature' });
    expect(rejection({ ...valid, thinking: 1, made_up: null })).toMatchObject({
      code: 'unsupported_parameter',
      param: 'thinking',
      message: expect.stringContaining('thinking, made_up'),
    });
  });

  it('lists a flood of unknown names briefly, first ones first', () => {
    const body: Record<string, unknown> = { ...valid };
    for (let i = 0; i < 50_000; i++) body[`k${i}`] = 1;
    expect(rejection(body)).toMatchObject({
      param: 'k0',
      message: expect.stringContaining('k0, k1, k2, k3, k4, k5, k6, k7, k8, k9 and 49990 more'),
    });
  });
});

describe('max_completion_tokens, the name LangChain sends max_tokens by', () => {
  it('is the same cap, as max_tokens', () => {
    // ChatOpenAI(max_tokens=10) sends this body.
    const body = { ...valid, n: 1, temperature: 0.7, max_completion_tokens: 10, stream: false };
    const request = parseChatRequest(body);
    expect(request.max_tokens).toBe(10);
    expect(request).not.toHaveProperty('max_completion_tokens');
  });

  it('is held to the rules of max_tokens, and refused beside it, as OpenAI does', () => {
    expect(rejection({ ...valid, max_completion_tokens: 0 })).toMatchObject({
      param: 'max_completion_tokens',
    });
    expect(rejection({ ...valid, max_completion_tokens: 10, max_tokens: 10 })).toMatchObject({
      code: 'invalid_parameter_combination',
      param: 'max_tokens',
    });
    expect(parseChatRequest({ ...valid, max_completion_tokens: null, max_tokens: 5 }).max_tokens).toBe(5);
  });
});

describe('what the whitelist refuses, null or not', () => {
  it.each(['thinking', 'reasoning_effort', 'logprobs', 'made_up'])('refuses %s: null, naming it', (param) => {
    expect(rejection({ ...valid, [param]: null })).toMatchObject({ code: 'unsupported_parameter', param });
  });

  it('still takes null for a whitelisted parameter as not given', () => {
    expect(() => parseChatRequest({ ...valid, temperature: null, tools: null, stream: null })).not.toThrow();
  });

  it('refuses an assistant message whose content is an empty array, as OpenAI does', () => {
    expect(
      rejection({
        ...valid,
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: [] },
          { role: 'user', content: 'again' },
        ],
      }).param,
    ).toBe('messages[1].content');
  });
});

describe('types and ranges', () => {
  it.each([
    ['temperature', 2.01],
    ['temperature', -0.1],
    ['top_p', 1.5],
    ['presence_penalty', 3],
    ['n', 0],
    ['n', 129],
    ['max_tokens', 0],
    ['max_tokens', 1.5],
    ['seed', 'x'],
    ['seed', 1.5],
    ['seed', 1e300],
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

describe('JSON Schemas inside a request', () => {
  it('pass on as written, a "__proto__" property included (it used to vanish on the way to the upstream)', () => {
    const body = JSON.parse(
      '{"model":"m","messages":[{"role":"user","content":"hi"}],' +
        '"tools":[{"type":"function","function":{"name":"f","parameters":{"__proto__":{"type":"object"},"required":["a"]}}}],' +
        '"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"__proto__":{"type":"string"}}}}}',
    );
    const request = parseChatRequest(body);
    expect(JSON.stringify(request.tools)).toContain(
      '"parameters":{"__proto__":{"type":"object"},"required":["a"]}',
    );
    expect(JSON.stringify(request.response_format)).toContain('"schema":{"__proto__":{"type":"string"}}');
    expect(
      rejection({ ...valid, tools: [{ type: 'function', function: { name: 'f', parameters: [] } }] }),
    ).toMatchObject({
      param: 'tools[0].function.parameters',
      message: expect.stringContaining('must be a JSON object'),
    });
  });
});

describe('assistant history', () => {
  it('accepts an assistant message exactly as a completion returned it, dropping its annotations', () => {
    const returned = { role: 'assistant', content: 'hi', refusal: null, annotations: [] };
    const request = parseChatRequest({ ...valid, messages: [...valid.messages, returned] });
    expect(request.messages[1]).toEqual({ role: 'assistant', content: 'hi', refusal: null });
  });

  it("takes back tool calls as the openai SDK's helpers hand them out for strict tools, without parsed_arguments", () => {
    const returned = {
      role: 'assistant',
      content: null,
      refusal: null,
      parsed: null,
      tool_calls: [
        {
          id: 'call_1',
          type: 'function',
          function: { name: 'get_time', arguments: '{"tz":"UTC"}', parsed_arguments: { tz: 'UTC' } },
        },
      ],
    };
    const request = parseChatRequest({
      ...valid,
      tools: [
        { type: 'function', function: { name: 'get_time', strict: true, parameters: { type: 'object' } } },
      ],
      messages: [...valid.messages, returned, { role: 'tool', tool_call_id: 'call_1', content: 'noon' }],
    });
    expect(request.messages[1]).toEqual({
      role: 'assistant',
      content: null,
      refusal: null,
      tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'get_time', arguments: '{"tz":"UTC"}' } },
      ],
    });
  });

  it('takes back a refused turn — as refusal content parts, or as content null beside the refusal — as what was said', () => {
    const request = parseChatRequest({
      ...valid,
      messages: [
        ...valid.messages,
        { role: 'assistant', content: [{ type: 'refusal', refusal: 'I cannot help with that.' }] },
        { role: 'user', content: 'why?' },
        { role: 'assistant', content: null, refusal: 'I still cannot.' },
        { role: 'user', content: 'ok' },
      ],
    });
    expect(request.messages[1]).toEqual({
      role: 'assistant',
      content: [{ type: 'text', text: 'I cannot help with that.' }],
    });
    expect(request.messages[3]).toEqual({ role: 'assistant', content: 'I still cannot.' });
    // Neither content, tool calls nor a refusal: nothing was said.
    expect(
      rejection({
        ...valid,
        messages: [...valid.messages, { role: 'assistant', content: null, refusal: null }],
      }),
    ).toMatchObject({ param: 'messages[1].content' });
    expect(
      rejection({
        ...valid,
        messages: [...valid.messages, { role: 'assistant', content: [{ type: 'image' }] }],
      }),
    ).toMatchObject({
      param: 'messages[1].content',
      message: expect.stringContaining('must be a string or an array of text (or refusal) parts'),
    });
  });
});

describe('tools, tool choice and tool results agree, as OpenAI requires', () => {
  const weather = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } };
  const calls = (...ids: string[]) => ({
    role: 'assistant',
    content: null,
    tool_calls: ids.map((id) => ({
      id,
      type: 'function',
      function: { name: 'get_weather', arguments: '{}' },
    })),
  });
  const result = (id: string) => ({ role: 'tool', tool_call_id: id, content: 'sunny' });
  const user = { role: 'user', content: 'weather?' };

  it('refuses an empty tools array', () => {
    const error = rejection({ ...valid, tools: [] });
    expect(error.param).toBe('tools');
    expect(error.message).toContain('empty array');
  });

  it.each(['none', 'auto', 'required', { type: 'function', function: { name: 'get_weather' } }])(
    'refuses tool_choice %j without tools',
    (choice) => {
      const error = rejection({ ...valid, tool_choice: choice });
      expect(error.param).toBe('tool_choice');
      expect(error.message).toBe(
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
      );
    },
  );

  it('refuses a tool choice naming a function that is not among the tools, and accepts one that is', () => {
    const named = (name: string) => ({
      ...valid,
      tools: [weather],
      tool_choice: { type: 'function', function: { name } },
    });
    const error = rejection(named('get_time'));
    expect(error.param).toBe('tool_choice.function.name');
    expect(error.message).toContain("'get_time' is not among 'tools' ('get_weather')");
    expect(parseChatRequest(named('get_weather')).tool_choice).toEqual({
      type: 'function',
      function: { name: 'get_weather' },
    });
  });

  it('accepts parallel calls answered in any order, and a conversation that goes on after them', () => {
    const messages = [
      user,
      calls('a', 'b'),
      result('b'),
      result('a'),
      { role: 'assistant', content: 'sunny' },
      user,
    ];
    expect(parseChatRequest({ ...valid, messages }).messages).toHaveLength(6);
  });

  it('refuses a tool result that follows no assistant message with tool calls', () => {
    const error = rejection({ ...valid, messages: [user, result('a')] });
    expect(error.param).toBe('messages[1].role');
    expect(error.message).toContain("must be a response to a preceding message with 'tool_calls'");
    // Nor after a user message that broke the run.
    expect(rejection({ ...valid, messages: [user, calls('a'), result('a'), user, result('a')] }).param).toBe(
      'messages[4].role',
    );
  });

  it('refuses a tool result whose tool_call_id matches no call, or one already answered', () => {
    expect(rejection({ ...valid, messages: [user, calls('a'), result('z')] }).param).toBe(
      'messages[2].tool_call_id',
    );
    expect(rejection({ ...valid, messages: [user, calls('a'), result('a'), result('a')] }).param).toBe(
      'messages[3].tool_call_id',
    );
  });

  it('refuses tool calls left unanswered, at the end or before the next message, naming them', () => {
    const atEnd = rejection({ ...valid, messages: [user, calls('a', 'b'), result('a')] });
    expect(atEnd.param).toBe('messages[1].tool_calls');
    expect(atEnd.message).toMatch(/did not have response messages: b$/);
    expect(rejection({ ...valid, messages: [user, calls('a'), user] }).param).toBe('messages[1].tool_calls');
  });
});

describe('response_format and images', () => {
  it('refuses a json_schema name OpenAI would refuse', () => {
    const format = (name: string) => ({
      ...valid,
      response_format: { type: 'json_schema', json_schema: { name, schema: { type: 'object' } } },
    });
    expect(rejection(format('my schema')).param).toBe('response_format.json_schema.name');
    expect(rejection(format('x'.repeat(65))).param).toBe('response_format.json_schema.name');
    expect(parseChatRequest(format('My_schema-1')).response_format).toBeDefined();
  });

  it.each([
    ['https://example.com/cat.png', true],
    ['http://example.com/cat.png?size=large', true],
    [`data:image/png;base64,${'A'.repeat(1000)}`, true],
    ['data:image/svg+xml;base64,PHN2Zz4=', true],
    ['cat.png', false],
    ['ftp://example.com/cat.png', false],
    ['file:///etc/passwd', false],
    ['data:text/plain;base64,aGk=', false],
    ['https://', false],
    ['', false],
  ])('image_url %s is accepted: %s', (url, accepted) => {
    const body = {
      ...valid,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }],
    };
    if (accepted) expect(parseChatRequest(body).messages).toHaveLength(1);
    else expect(rejection(body).param).toBe('messages[0].content[0].image_url.url');
  });
});
