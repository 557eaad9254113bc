import { describe, expect, it } from 'vitest';
import {
  anthropicFailureKind,
  anthropicStatusFailure,
  anthropicUsage,
  finishReason,
  fromMessagesResponse,
  type MessagesMessage,
  MessagesStreamTranslator,
  toMessagesRequest,
} from '#adapters/upstream/anthropic-translate.ts';
import { type ChatRequest, DEFAULT_MAX_TOKENS, prepareChat, upstreamChatBody } from '#core/chat.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import type { ChatStreamEvent } from '#core/upstream.ts';
import { chatModel, deployment, wordCounter } from '#test/fixtures.ts';

type Json = Record<string, unknown>;

/** A chat-completions upstream body as core/chat.ts `upstreamChatBody` builds it. */
const chatBody = (extra: Json = {}): Json => ({
  model: 'claude-upstream',
  messages: [{ role: 'user', content: 'hello' }],
  max_tokens: 256,
  temperature: 0.7,
  ...extra,
});

const rejectedWith = (fn: () => unknown): UpstreamFailure => {
  try {
    fn();
  } catch (error) {
    if (error instanceof UpstreamFailure) return error;
    throw error;
  }
  throw new Error('expected an UpstreamFailure');
};

describe('toMessagesRequest', () => {
  it('maps the basic fields: model, max_tokens, messages, temperature, stop, stream', () => {
    expect(toMessagesRequest(chatBody({ stop: 'END', stream: true }))).toEqual({
      model: 'claude-upstream',
      max_tokens: 256,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }] }],
      temperature: 0.7,
      stop_sequences: ['END'],
      stream: true,
    });
    expect(toMessagesRequest(chatBody({ stop: ['a', 'b'] })).stop_sequences).toEqual(['a', 'b']);
  });

  it('clamps temperature to Anthropic’s 0–1 instead of scaling it', () => {
    expect(toMessagesRequest(chatBody({ temperature: 1.6 })).temperature).toBe(1);
    expect(toMessagesRequest(chatBody({ temperature: 0.3 })).temperature).toBe(0.3);
    expect(toMessagesRequest(chatBody({ temperature: 0 })).temperature).toBe(0);
  });

  it('takes max_tokens, else max_completion_tokens, else the gateway default (Anthropic requires one)', () => {
    expect(toMessagesRequest(chatBody({ max_tokens: undefined, max_completion_tokens: 99 })).max_tokens).toBe(
      99,
    );
    expect(toMessagesRequest(chatBody({ max_tokens: undefined })).max_tokens).toBe(DEFAULT_MAX_TOKENS);
  });

  it('drops what Messages has no equivalent for', () => {
    const out = toMessagesRequest(
      chatBody({
        seed: 7,
        presence_penalty: 0.5,
        frequency_penalty: 0.5,
        n: 1,
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    expect(Object.keys(out).sort()).toEqual(['max_tokens', 'messages', 'model', 'stream', 'temperature']);
  });

  it('hoists every system message into the top-level system, joined by a blank line', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'hi' },
          {
            role: 'system',
            content: [
              { type: 'text', text: 'Use French.' },
              { type: 'text', text: 'No emoji.' },
            ],
          },
          { role: 'user', content: 'again' },
        ],
      }),
    );
    expect(out.system).toBe('Be brief.\n\nUse French.\nNo emoji.');
    // With the system messages gone, the two user turns are adjacent and merge into one.
    expect(out.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'hi' },
          { type: 'text', text: 'again' },
        ],
      },
    ]);
  });

  it('turns image_url parts into image blocks: data URLs as base64, http URLs as url sources', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is this?' },
              { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } },
              { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
            ],
          },
        ],
      }),
    );
    expect(out.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
          { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
        ],
      },
    ]);
  });

  it('refuses an image URL that is neither http(s) nor a base64 data URL, naming the part', () => {
    const failure = rejectedWith(() =>
      toMessagesRequest(
        chatBody({
          messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'ftp://x/y.png' } }] }],
        }),
      ),
    );
    // Another deployment (an OpenAI-compatible one) may take it: 'unsupported' moves the route on, and the
    // client gets this 400 only when none can.
    expect(failure.kind).toBe('unsupported');
    expect(failure.upstreamError?.param).toBe('messages[0].content[0]');
  });

  it('reads a data URL whose scheme and `;base64` are upper case, as our validation accepts it', () => {
    const body = toMessagesRequest(
      chatBody({
        messages: [
          {
            role: 'user',
            content: [{ type: 'image_url', image_url: { url: 'DATA:Image/PNG;BASE64,iVBORw0K' } }],
          },
        ],
      }),
    ) as { messages: { content: { source: unknown }[] }[] };
    expect(body.messages[0]?.content[0]?.source).toEqual({
      type: 'base64',
      media_type: 'image/png',
      data: 'iVBORw0K',
    });
  });

  it('cannot send a conversation of system messages alone (Messages needs a turn): another deployment may', () => {
    const failure = rejectedWith(() =>
      toMessagesRequest(chatBody({ messages: [{ role: 'system', content: 'Be brief.' }] })),
    );
    expect(failure).toMatchObject({ kind: 'unsupported' });
    expect(failure.upstreamError?.param).toBe('messages');
  });

  it('maps tools and every tool_choice form', () => {
    const tools = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather for a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
        },
      },
      { type: 'function', function: { name: 'ping' } },
    ];
    const out = toMessagesRequest(chatBody({ tools, tool_choice: 'auto' }));
    expect(out.tools).toEqual([
      {
        name: 'get_weather',
        description: 'Weather for a city',
        input_schema: { type: 'object', properties: { city: { type: 'string' } } },
      },
      { name: 'ping', input_schema: { type: 'object', properties: {} } },
    ]);
    expect(out.tool_choice).toEqual({ type: 'auto' });
    expect(toMessagesRequest(chatBody({ tools, tool_choice: 'required' })).tool_choice).toEqual({
      type: 'any',
    });
    expect(toMessagesRequest(chatBody({ tools, tool_choice: 'none' })).tool_choice).toEqual({ type: 'none' });
    expect(
      toMessagesRequest(chatBody({ tools, tool_choice: { type: 'function', function: { name: 'ping' } } }))
        .tool_choice,
    ).toEqual({ type: 'tool', name: 'ping' });
    expect(toMessagesRequest(chatBody({ tools })).tool_choice).toBeUndefined();
  });

  it('replays assistant tool calls as tool_use blocks and tool messages as one user turn of tool_results', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'user', content: 'Weather in Paris and Rome?' },
          {
            role: 'assistant',
            content: 'Checking.',
            tool_calls: [
              {
                id: 'call_1',
                type: 'function',
                function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
              },
              { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: '18°C' },
          { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: '21°C' }] },
          { role: 'user', content: 'Thanks' },
        ],
      }),
    );
    expect(out.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris and Rome?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'call_2', name: 'get_weather', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'call_1', content: '18°C' },
          { type: 'tool_result', tool_use_id: 'call_2', content: [{ type: 'text', text: '21°C' }] },
          { type: 'text', text: 'Thanks' },
        ],
      },
    ]);
    // No tools offered now (an agent's last turn): Messages refuses tool blocks without tool definitions, so the
    // tools the history used are declared, and none may be called.
    expect(out.tools).toEqual([{ name: 'get_weather', input_schema: { type: 'object', properties: {} } }]);
    expect(out.tool_choice).toEqual({ type: 'none' });
    // With tools offered, those are what is sent, as the client gave them.
    const offered = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'user', content: 'Weather?' },
          {
            role: 'assistant',
            tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{}' } }],
          },
          { role: 'tool', tool_call_id: 'c1', content: '18°C' },
        ],
        tools: [{ type: 'function', function: { name: 'ping' } }],
      }),
    );
    expect(offered.tools).toEqual([{ name: 'ping', input_schema: { type: 'object', properties: {} } }]);
    expect(offered.tool_choice).toBeUndefined();
    // Without any tool call in the history, nothing is declared.
    expect(toMessagesRequest(chatBody({})).tools).toBeUndefined();
  });

  it('leaves out empty text (Messages refuses empty text blocks)', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'user', content: 'go' },
          {
            role: 'assistant',
            content: '',
            tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }],
          },
        ],
      }),
    );
    expect((out.messages as Json[])[1]).toEqual({
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'c', name: 'f', input: {} }],
    });
  });

  it('refuses tool call arguments that are not a JSON object', () => {
    const failure = rejectedWith(() =>
      toMessagesRequest(
        chatBody({
          messages: [
            {
              role: 'assistant',
              content: null,
              tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '[1,2' } }],
            },
          ],
        }),
      ),
    );
    expect(failure).toMatchObject({ kind: 'unsupported' });
    expect(failure.upstreamError?.param).toBe('messages[0].tool_calls[0].function.arguments');
  });

  it('cannot express n > 1 (Messages returns one reply): unsupported, so another deployment may serve it', () => {
    const failure = rejectedWith(() => toMessagesRequest(chatBody({ n: 2 })));
    expect(failure.kind).toBe('unsupported');
    expect(failure.upstreamError).toMatchObject({ param: 'n', code: 'unsupported_parameter' });
  });

  it('turns JSON mode into a system instruction', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'hi' },
        ],
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } },
      }),
    );
    expect(out.system).toMatch(
      /^Be brief\.\n\nRespond with a single valid JSON object.*\{"type":"object"\}$/,
    );
    expect(toMessagesRequest(chatBody({ response_format: { type: 'json_object' } })).system).toMatch(/JSON/);
    expect(toMessagesRequest(chatBody({ response_format: { type: 'text' } })).system).toBeUndefined();
  });

  it('passes a deployment’s thinking parameter through, without the sampling knobs Anthropic then refuses', () => {
    const thinking = { type: 'enabled', budget_tokens: 1024 };
    const out = toMessagesRequest(
      chatBody({ thinking, top_p: 0.5, reasoning_effort: 'medium', max_tokens: 4096 }),
    );
    expect(out.thinking).toEqual(thinking);
    expect(out).not.toHaveProperty('temperature');
    expect(out).not.toHaveProperty('top_p');
    expect(out).not.toHaveProperty('reasoning_effort');
  });

  it('fits the thinking budget within max_tokens, which Messages requires it to stay below', () => {
    const thinking = { type: 'enabled', budget_tokens: 2048 };
    // Reasoning counts inside max_tokens, as in OpenAI's max_completion_tokens: the budget shrinks to fit.
    expect(toMessagesRequest(chatBody({ thinking, max_tokens: 1500 })).thinking).toEqual({
      type: 'enabled',
      budget_tokens: 1499,
    });
    expect(toMessagesRequest(chatBody({ thinking, max_tokens: 8000 })).thinking).toEqual(thinking);
    // No budget fits under 1025 (Messages' least is 1024): another deployment may serve it, else a 400 that says so.
    expect(rejectedWith(() => toMessagesRequest(chatBody({ thinking, max_tokens: 500 })))).toMatchObject({
      kind: 'unsupported',
      upstreamError: { param: 'max_tokens' },
    });
  });

  it('cannot force a tool call while thinking (Messages takes only auto and none then)', () => {
    const thinking = { type: 'enabled', budget_tokens: 1024 };
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
    const body = (tool_choice: unknown) => chatBody({ thinking, max_tokens: 4096, tools, tool_choice });
    expect(rejectedWith(() => toMessagesRequest(body('required')))).toMatchObject({
      kind: 'unsupported',
      upstreamError: { param: 'tool_choice' },
    });
    expect(
      rejectedWith(() => toMessagesRequest(body({ type: 'function', function: { name: 'f' } }))),
    ).toMatchObject({ kind: 'unsupported' });
    expect(toMessagesRequest(body('auto')).tool_choice).toEqual({ type: 'auto' });
  });
});

/** The Messages request core's upstream body for `request` becomes (the default temperature applied by core). */
const viaCore = (request: Partial<ChatRequest>): Json =>
  toMessagesRequest(
    upstreamChatBody(
      prepareChat(
        { model: 'famA-test', messages: [{ role: 'user', content: 'hello' }], ...request },
        chatModel(),
        wordCounter,
      ),
      deployment({ adapter: 'anthropic' }),
    ),
  );

describe('temperature and top_p, which Claude 4.5-era models refuse together', () => {
  it('sends the client’s top_p alone, without the default temperature core filled in', () => {
    const out = viaCore({ top_p: 0.9 });
    expect(out.top_p).toBe(0.9);
    expect(out).not.toHaveProperty('temperature');
  });

  it('still sends the default temperature when the client gave neither, and the client’s alone', () => {
    expect(viaCore({})).toMatchObject({ temperature: 0.7 });
    expect(viaCore({})).not.toHaveProperty('top_p');
    expect(viaCore({ temperature: 0.2 })).toMatchObject({ temperature: 0.2 });
  });

  it('sends a client’s own pair as sent (older models take it; a deployment whose model does not omits top_p)', () => {
    expect(viaCore({ temperature: 0.2, top_p: 0.9 })).toMatchObject({ temperature: 0.2, top_p: 0.9 });
  });

  it('leaves out a top_p of 1, a no-op LangChain sends by default, so the client’s temperature goes alone', () => {
    const out = viaCore({ temperature: 0.2, top_p: 1 });
    expect(out).toMatchObject({ temperature: 0.2 });
    expect(out).not.toHaveProperty('top_p');
    expect(viaCore({ top_p: 1 })).toMatchObject({ temperature: 0.7 });
  });
});

describe('thinking in a conversation chat history cannot carry thinking blocks for', () => {
  const thinking = { type: 'enabled', budget_tokens: 2048 };
  const call = { id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } };
  const toolLoop = [
    { role: 'user', content: 'go' },
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: 'call_1', content: 'done' },
  ];
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];

  it('leaves thinking out of a tool-loop continuation, and what only thinking required with it', () => {
    const out = toMessagesRequest(chatBody({ thinking, max_tokens: 4096, messages: toolLoop }));
    expect(out).not.toHaveProperty('thinking');
    // Sampling as without thinking.
    expect(out.temperature).toBe(0.7);
    // A cap too small for a thinking budget, and a forced tool call, are no longer in the way.
    expect(toMessagesRequest(chatBody({ thinking, max_tokens: 500, messages: toolLoop }))).not.toHaveProperty(
      'thinking',
    );
    expect(
      toMessagesRequest(chatBody({ thinking, messages: toolLoop, tools, tool_choice: 'required' }))
        .tool_choice,
    ).toEqual({ type: 'any' });
    // Tool results and a user's text in one turn still continue the loop.
    const withText = [...toolLoop, { role: 'user', content: 'and then?' }];
    expect(
      toMessagesRequest(chatBody({ thinking, max_tokens: 4096, messages: withText })),
    ).not.toHaveProperty('thinking');
  });

  it('leaves thinking out of a prefill (a conversation that ends on an assistant message)', () => {
    const prefill = [
      { role: 'user', content: 'go' },
      { role: 'assistant', content: 'Sure,' },
    ];
    expect(toMessagesRequest(chatBody({ thinking, max_tokens: 4096, messages: prefill }))).not.toHaveProperty(
      'thinking',
    );
  });

  it('keeps thinking for a conversation that ends on the user’s own words', () => {
    const next = [
      ...toolLoop,
      { role: 'assistant', content: 'Done.' },
      { role: 'user', content: 'Thanks, now this.' },
    ];
    expect(toMessagesRequest(chatBody({ thinking, max_tokens: 4096, messages: next })).thinking).toEqual(
      thinking,
    );
  });
});

describe('stop sequences', () => {
  it.each([['\n'], [['', 'END']], [[' \t', 'END']]])(
    'cannot send a stop sequence without a non-whitespace character (%j): unsupported, naming stop',
    (stop) => {
      const failure = rejectedWith(() => toMessagesRequest(chatBody({ stop })));
      expect(failure.kind).toBe('unsupported');
      expect(failure.upstreamError?.param).toBe('stop');
      expect(failure.upstreamError?.message).toMatch(/non-whitespace/);
    },
  );

  it('sends stop sequences with whitespace around other characters as they are', () => {
    expect(toMessagesRequest(chatBody({ stop: ['\nUser:', ' END '] })).stop_sequences).toEqual([
      '\nUser:',
      ' END ',
    ]);
  });
});

describe('whitespace-only text', () => {
  it('sends no system text that is only whitespace', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'system', content: ' \n ' },
          { role: 'user', content: 'hi' },
        ],
      }),
    );
    expect(out).not.toHaveProperty('system');
  });

  it('leaves out text blocks that are only whitespace', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: ' \n ' },
              { type: 'text', text: 'hi' },
            ],
          },
        ],
      }),
    );
    expect(out.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: 'hi' }] }]);
  });

  it('drops an assistant turn left with nothing, merging the user turns around it', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: '  \n' },
          { role: 'user', content: 'again' },
        ],
      }),
    );
    expect(out.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'hi' },
          { type: 'text', text: 'again' },
        ],
      },
    ]);
  });

  it('trims the end of a final assistant message (a prefill), and only of that one', () => {
    const out = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'Hello! ' },
          { role: 'user', content: 'Count to three.' },
          { role: 'assistant', content: [{ type: 'text', text: ' One, two, \n' }] },
        ],
      }),
    );
    expect((out.messages as MessagesMessage[]).map((m) => m.content)).toEqual([
      [{ type: 'text', text: 'hi' }],
      [{ type: 'text', text: 'Hello! ' }],
      [{ type: 'text', text: 'Count to three.' }],
      [{ type: 'text', text: ' One, two,' }],
    ]);
  });
});

describe('tool results', () => {
  it('sends no content for a tool with no output (Messages refuses empty text), and keeps any other', () => {
    const call = (id: string) => ({ id, type: 'function', function: { name: 'f', arguments: '{}' } });
    const out = toMessagesRequest(
      chatBody({
        messages: [
          { role: 'user', content: 'go' },
          { role: 'assistant', content: null, tool_calls: [call('c1'), call('c2'), call('c3'), call('c4')] },
          { role: 'tool', tool_call_id: 'c1', content: '' },
          { role: 'tool', tool_call_id: 'c2', content: ' \n' },
          { role: 'tool', tool_call_id: 'c3', content: [{ type: 'text', text: '  ' }] },
          { role: 'tool', tool_call_id: 'c4', content: 'ok' },
        ],
      }),
    );
    expect((out.messages as MessagesMessage[])[2]?.content).toEqual([
      { type: 'tool_result', tool_use_id: 'c1' },
      { type: 'tool_result', tool_use_id: 'c2' },
      { type: 'tool_result', tool_use_id: 'c3' },
      { type: 'tool_result', tool_use_id: 'c4', content: 'ok' },
    ]);
  });
});

describe('tool call ids', () => {
  const ANTHROPIC_ID = /^[a-zA-Z0-9_-]+$/;
  const loop = (id: string) => [
    { role: 'user', content: 'go' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id, type: 'function', function: { name: 'f', arguments: '{}' } }],
    },
    { role: 'tool', tool_call_id: id, content: 'done' },
  ];
  /** The tool_use id and the tool_result's tool_use_id sent for a loop whose call has `id`. */
  const sentIds = (id: string) => {
    const [, assistant, results] = toMessagesRequest(chatBody({ messages: loop(id) })).messages as {
      content: { id?: string; tool_use_id?: string }[];
    }[];
    return { use: assistant?.content[0]?.id, result: results?.content[0]?.tool_use_id };
  };

  it('keeps ids Anthropic takes as they are', () => {
    expect(sentIds('call_Ab-9')).toEqual({ use: 'call_Ab-9', result: 'call_Ab-9' });
  });

  it.each(['functions.get_weather:0', 'call:1', 'a b/c'])(
    'maps an id other providers write (%s) to one Anthropic takes, alike in the call and its result',
    (id) => {
      const { use, result } = sentIds(id);
      expect(use).toMatch(ANTHROPIC_ID);
      expect(result).toBe(use);
      // Deterministic: a later turn replaying the same history maps it alike.
      expect(sentIds(id)).toEqual({ use, result });
    },
  );

  it('maps without collisions: an id that differs only in a replaced character, or an id already valid', () => {
    const ids = ['call:1', 'call.1', 'call_1'].map((id) => sentIds(id).use);
    expect(new Set(ids).size).toBe(3);
    expect(ids[2]).toBe('call_1');
  });

  it('sends an id reused on a later turn as another (Messages refuses a repeat), its result answering it', () => {
    const turn = (text: string) => [
      { role: 'user', content: text },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'call_0', content: text },
    ];
    const out = toMessagesRequest(chatBody({ messages: [...turn('one'), ...turn('two')] }));
    const blocks = (
      out.messages as { content: { type: string; id?: string; tool_use_id?: string }[] }[]
    ).flatMap((m) => m.content);
    const uses = blocks.filter((b) => b.type === 'tool_use').map((b) => b.id);
    const results = blocks.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id);
    expect(uses[0]).toBe('call_0');
    expect(uses[1]).toMatch(ANTHROPIC_ID);
    expect(new Set(uses).size).toBe(2);
    expect(results).toEqual(uses);
  });

  it('caps the length of a mapped id', () => {
    const { use } = sentIds(`x:${'y'.repeat(300)}`);
    expect(use).toMatch(ANTHROPIC_ID);
    expect(use?.length).toBeLessThanOrEqual(64);
    expect(sentIds(`x:${'y'.repeat(300)}`).use).not.toBe(sentIds(`x:${'y'.repeat(299)}z`).use);
  });
});

describe('image data URLs', () => {
  const base64 = (bytes: string) => Buffer.from(bytes, 'latin1').toString('base64');
  const JPEG = base64('\xff\xd8\xff\xe0\x00\x10JFIF\x00');
  const PNG = base64('\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR');
  const GIF = base64('GIF89a\x01\x00\x01\x00');
  const WEBP = base64('RIFF\x24\x00\x00\x00WEBPVP8 ');
  const imageSent = (url: string): unknown => {
    const out = toMessagesRequest(
      chatBody({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }] }),
    ) as { messages: { content: { source: unknown }[] }[] };
    return out.messages[0]?.content[0]?.source;
  };

  it.each([
    ['image/jpg', 'JPEG', 'image/jpeg', JPEG],
    ['image/pjpeg', 'JPEG', 'image/jpeg', JPEG],
    ['image/jpeg', 'JPEG', 'image/jpeg', JPEG],
    ['image/png', 'PNG', 'image/png', PNG],
    ['image/gif', 'GIF', 'image/gif', GIF],
    ['image/webp', 'WebP', 'image/webp', WEBP],
    // Anthropic checks the bytes against the declared type: the bytes' type is sent.
    ['image/png', 'JPEG', 'image/jpeg', JPEG],
    ['image/jpeg', 'WebP', 'image/webp', WEBP],
    ['application/octet-stream', 'GIF', 'image/gif', GIF],
  ])('sends a data URL declared %s of %s bytes as %s', (declared, _, sent, data) => {
    expect(imageSent(`data:${declared};base64,${data}`)).toEqual({ type: 'base64', media_type: sent, data });
  });

  it('refuses an image whose bytes are none of JPEG, PNG, GIF, WebP, naming it', () => {
    for (const data of [base64('BM\x3a\x00\x00\x00\x00\x00'), base64('RIFF\x24\x00\x00\x00WAVEfmt '), '']) {
      const failure = rejectedWith(() =>
        toMessagesRequest(
          chatBody({
            messages: [
              {
                role: 'user',
                content: [
                  { type: 'text', text: 'what?' },
                  { type: 'image_url', image_url: { url: `data:image/png;base64,${data}` } },
                ],
              },
            ],
          }),
        ),
      );
      expect(failure.kind).toBe('unsupported');
      expect(failure.upstreamError).toMatchObject({ param: 'messages[0].content[1]', code: 'invalid_value' });
      expect(failure.upstreamError?.message).toMatch(/messages\[0\]\.content\[1\]/);
    }
  });

  it('leaves URL images as they are', () => {
    expect(imageSent('https://example.com/cat.bmp')).toEqual({
      type: 'url',
      url: 'https://example.com/cat.bmp',
    });
  });
});

describe('tool parameter schemas', () => {
  it('gives a schema without a type the `type: "object"` Anthropic requires', () => {
    const tools = [
      { type: 'function', function: { name: 'empty', parameters: {} } },
      {
        type: 'function',
        function: { name: 'untyped', parameters: { properties: { a: { type: 'string' } } } },
      },
      { type: 'function', function: { name: 'typed', parameters: { type: 'object', required: [] } } },
    ];
    expect(toMessagesRequest(chatBody({ tools })).tools).toEqual([
      { name: 'empty', input_schema: { type: 'object', properties: {} } },
      { name: 'untyped', input_schema: { type: 'object', properties: { a: { type: 'string' } } } },
      { name: 'typed', input_schema: { type: 'object', required: [] } },
    ]);
  });
});

const relabel = { publicModel: 'famC-k3', created: 1_700_000_000 };

const message = (extra: Json = {}): Json => ({
  id: 'msg_01',
  type: 'message',
  role: 'assistant',
  model: 'claude-upstream',
  content: [{ type: 'text', text: 'Hello there' }],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 12, output_tokens: 3, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
  ...extra,
});

describe('fromMessagesResponse', () => {
  it('builds a chat.completion relabelled with the public model', () => {
    expect(fromMessagesResponse(message(), relabel)).toEqual({
      body: {
        id: 'msg_01',
        object: 'chat.completion',
        created: 1_700_000_000,
        model: 'famC-k3',
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: 'Hello there', refusal: null },
            logprobs: null,
            finish_reason: 'stop',
          },
        ],
        usage: {
          prompt_tokens: 12,
          completion_tokens: 3,
          total_tokens: 15,
          prompt_tokens_details: { cached_tokens: 0 },
        },
      },
      usage: {
        promptTokens: 12,
        completionTokens: 3,
        cachedPromptTokens: 0,
        reasoningTokens: 0,
        source: 'upstream',
      },
    });
  });

  it('turns tool_use blocks into tool_calls with JSON arguments, and thinking into reasoning_content', () => {
    const { body } = fromMessagesResponse(
      message({
        content: [
          { type: 'thinking', thinking: 'hmm', signature: 's' },
          { type: 'redacted_thinking', data: 'opaque' },
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
        ],
        stop_reason: 'tool_use',
      }),
      relabel,
    );
    // Shown reasoning is relayed as OpenAI-compatible upstreams' is (and counted if we must estimate usage).
    expect((body.choices as Json[])[0]).toEqual({
      index: 0,
      message: {
        role: 'assistant',
        content: null,
        refusal: null,
        reasoning_content: 'hmm',
        tool_calls: [
          {
            id: 'toolu_1',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
          },
        ],
      },
      logprobs: null,
      finish_reason: 'tool_calls',
    });
  });

  it('counts cache reads and writes as prompt tokens, with the reads as cached_tokens', () => {
    const { body, usage } = fromMessagesResponse(
      message({
        usage: {
          input_tokens: 100,
          cache_read_input_tokens: 1024,
          cache_creation_input_tokens: 256,
          output_tokens: 20,
        },
      }),
      relabel,
    );
    expect(body.usage).toEqual({
      prompt_tokens: 1380,
      completion_tokens: 20,
      total_tokens: 1400,
      prompt_tokens_details: { cached_tokens: 1024 },
    });
    expect(usage).toMatchObject({ promptTokens: 1380, completionTokens: 20, cachedPromptTokens: 1024 });
  });

  it('reports no usage when the upstream sent none, so core estimates', () => {
    const { body, usage } = fromMessagesResponse(message({ usage: undefined }), relabel);
    expect(usage).toBeNull();
    expect(body).not.toHaveProperty('usage');
    expect(anthropicUsage({ output_tokens: 3 })).toBeNull();
    // A whole reply's report without its output count is no report either: billed as 0 completion tokens, it
    // served the reply free.
    expect(fromMessagesResponse(message({ usage: { input_tokens: 812 } }), relabel).usage).toBeNull();
  });

  it('fails as a protocol fault on anything that is not a Messages response', () => {
    expect(rejectedWith(() => fromMessagesResponse({ choices: [] }, relabel)).kind).toBe('protocol');
  });
});

describe('finishReason', () => {
  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['pause_turn', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['tool_use', 'tool_calls'],
    ['refusal', 'content_filter'],
    [null, 'stop'],
  ])('maps %s to %s', (stop, finish) => {
    expect(finishReason(stop)).toBe(finish);
  });
});

/** Anthropic's 400 `invalid_request_error` with `message`, as routing reads it. */
const invalidRequest = (message: string) =>
  anthropicStatusFailure(400, { message, type: 'invalid_request_error', code: null, param: null });

describe('anthropicFailureKind', () => {
  it.each([
    [529, 'overloaded_error', 'overloaded'],
    // Our key's rate limit: a stream tries the deployment's next key, as for an OpenAI-compatible 429.
    [429, 'rate_limit_error', 'rate_limited'],
    [500, 'api_error', 'server_error'],
    [503, null, 'server_error'],
    [404, 'not_found_error', 'server_error'],
    [401, 'authentication_error', 'auth'],
    [403, 'permission_error', 'auth'],
    [402, 'billing_error', 'auth'],
    [400, 'invalid_request_error', 'rejected'],
    // Larger than this deployment takes in one call: another may take it.
    [413, 'request_too_large', 'unsupported'],
  ] as const)('reads %i %s as %s', (status, type, kind) => {
    expect(anthropicFailureKind(status, type)).toBe(kind);
  });

  it("reads Anthropic's out-of-credit 400 as our provider account's failure, not the client's request", () => {
    const failure = invalidRequest(
      'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.',
    );
    // 'auth': the next deployment is tried, the deployment's health counts it, the client never sees it.
    expect(failure).toMatchObject({ kind: 'auth', status: 400 });
  });

  it('keeps a busy answer’s Retry-After for the all-busy 429, and nothing else’s', () => {
    const overloaded = { message: 'Overloaded', type: 'overloaded_error', code: null, param: null };
    expect(anthropicStatusFailure(529, overloaded, 5_000)).toMatchObject({
      kind: 'overloaded',
      retryAfterMs: 5_000,
    });
    const limited = { message: 'Rate limited', type: 'rate_limit_error', code: null, param: null };
    expect(anthropicStatusFailure(429, limited, 2_000)).toMatchObject({
      kind: 'rate_limited',
      retryAfterMs: 2_000,
    });
    expect(anthropicStatusFailure(500, null, 5_000)).toMatchObject({
      kind: 'server_error',
      retryAfterMs: null,
    });
  });

  it.each([
    [
      'a prompt longer than the window',
      'prompt is too long: 208342 tokens > 200000 maximum',
      "This model's maximum context length is 200000 tokens. However, your messages resulted in 208342 tokens. Please reduce the length of the messages.",
    ],
    [
      'a prompt whose completion cap does not fit beside it (older models’ words)',
      'input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again',
      "This model's maximum context length is 200000 tokens. However, you requested 207951 tokens (199759 in the messages, 8192 in the completion). Please reduce the length of the messages or completion.",
    ],
  ])('reads %s as the deployment’s limit, told as context_length_exceeded', (_, said, told) => {
    const failure = invalidRequest(said);
    // 'unsupported': a deployment with a larger window may serve it; only if none can does the client get this.
    expect(failure).toMatchObject({ kind: 'unsupported', status: 400 });
    expect(failure.upstreamError).toEqual({
      message: told,
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
      param: 'messages',
    });
  });

  it('reads a request or an image over the deployment’s size limits as its limits', () => {
    const tooLarge = anthropicStatusFailure(413, {
      message: 'Request exceeds the maximum allowed number of bytes.',
      type: 'request_too_large',
      code: null,
      param: null,
    });
    expect(tooLarge).toMatchObject({ kind: 'unsupported', upstreamError: { code: 'request_too_large' } });
    for (const message of [
      'messages.0.content.1.image.source.base64: image exceeds 5 MB maximum: 7340032 bytes > 5242880 bytes',
      'messages.2.content.0.image.source.base64.data: At least one of the image dimensions exceed max allowed size: 8000 pixels',
    ]) {
      const image = invalidRequest(message);
      expect(image.kind).toBe('unsupported');
      expect(image.upstreamError?.message).toMatch(/image/i);
    }
  });

  it('reads a refused prefill (Claude 4.6 on) as the deployment’s limit: another deployment may continue the turn', () => {
    const failure = invalidRequest(
      'This model does not support assistant message prefill. The conversation must end with a user message.',
    );
    expect(failure.kind).toBe('unsupported');
    expect(failure.upstreamError).toMatchObject({ code: 'invalid_value', param: 'messages' });
    expect(failure.upstreamError?.message).toMatch(/must end with a user message/);
  });

  it('matches only the provider’s own words: a message that quotes the request further on stays a rejection', () => {
    const failure = invalidRequest(
      'tools.0.custom.name: String should match pattern; got "prompt is too long: 1 tokens > 0 maximum"',
    );
    expect(failure.kind).toBe('rejected');
  });

  it('keeps the upstream’s message for the client on a rejection', () => {
    const failure = invalidRequest('messages: roles must alternate');
    expect(failure).toMatchObject({ kind: 'rejected', status: 400 });
    expect(failure.upstreamError?.message).toBe('messages: roles must alternate');
  });
});

/** Feeds upstream events through a translator; returns the chat events and the parsed chunks. */
const translate = (events: Json[], clientWantsUsage = false) => {
  const translator = new MessagesStreamTranslator({ ...relabel, clientWantsUsage });
  const out: ChatStreamEvent[] = [];
  for (const event of events) out.push(...translator.translate(JSON.stringify(event)));
  return { out, chunks: out.map((e) => JSON.parse(e.data) as Json), finished: translator.finished };
};

const start = (usage: Json = { input_tokens: 25, output_tokens: 1 }): Json => ({
  type: 'message_start',
  message: { id: 'msg_s', type: 'message', role: 'assistant', model: 'claude-upstream', content: [], usage },
});

const textStream: Json[] = [
  start({ input_tokens: 25, cache_read_input_tokens: 0, cache_creation_input_tokens: 0, output_tokens: 1 }),
  { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
  { type: 'ping' },
  { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hello' } },
  { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ' world' } },
  { type: 'content_block_stop', index: 0 },
  {
    type: 'message_delta',
    delta: { stop_reason: 'end_turn', stop_sequence: null },
    usage: { output_tokens: 2 },
  },
  { type: 'message_stop' },
];

describe('MessagesStreamTranslator', () => {
  it('turns a text stream into role, content, finish and usage-only chunks', () => {
    const { out, chunks, finished } = translate(textStream);
    expect(finished).toBe(true);
    const envelope = {
      id: 'msg_s',
      object: 'chat.completion.chunk',
      created: 1_700_000_000,
      model: 'famC-k3',
    };
    expect(chunks).toEqual([
      {
        ...envelope,
        choices: [
          { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
        ],
      },
      {
        ...envelope,
        choices: [{ index: 0, delta: { content: 'Hello' }, logprobs: null, finish_reason: null }],
      },
      {
        ...envelope,
        choices: [{ index: 0, delta: { content: ' world' }, logprobs: null, finish_reason: null }],
      },
      { ...envelope, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] },
      {
        ...envelope,
        choices: [],
        usage: {
          prompt_tokens: 25,
          completion_tokens: 2,
          total_tokens: 27,
          prompt_tokens_details: { cached_tokens: 0 },
        },
      },
    ]);
    expect(out.map((e) => e.output)).toEqual([[], ['Hello'], [' world'], [], []]);
    expect(out.map((e) => e.usageOnly)).toEqual([false, false, false, false, true]);
    expect(out.at(-1)?.usage).toEqual({
      promptTokens: 25,
      completionTokens: 2,
      cachedPromptTokens: 0,
      reasoningTokens: 0,
      source: 'upstream',
    });
  });

  it('adds "usage":null to every other chunk when the client asked for usage, as OpenAI does', () => {
    const { chunks } = translate(textStream, true);
    for (const chunk of chunks.slice(0, -1)) expect(chunk).toHaveProperty('usage', null);
    expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 25 });
  });

  it('merges message_start’s input side with message_delta’s cumulative counts, cache tokens included', () => {
    const { out } = translate([
      start({
        input_tokens: 10,
        cache_read_input_tokens: 2048,
        cache_creation_input_tokens: 0,
        output_tokens: 1,
      }),
      { type: 'message_delta', delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 40 } },
      { type: 'message_stop' },
    ]);
    expect(JSON.parse(out[1]?.data ?? '{}').choices[0].finish_reason).toBe('length');
    expect(out.at(-1)?.usage).toMatchObject({
      promptTokens: 2058,
      completionTokens: 40,
      cachedPromptTokens: 2048,
    });
  });

  it('never lets a smaller count replace a larger: a proxy that sends input_tokens 0 with the final counts', () => {
    const { out } = translate([
      start({ input_tokens: 100, cache_read_input_tokens: 50, output_tokens: 1 }),
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: 'Hi' } },
      {
        type: 'message_delta',
        delta: { stop_reason: 'end_turn' },
        usage: { input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 20 },
      },
      { type: 'message_stop' },
    ]);
    expect(out.at(-1)?.usage).toMatchObject({
      promptTokens: 150,
      completionTokens: 20,
      cachedPromptTokens: 50,
    });
  });

  it('reports no usage when message_delta brought no output count: message_start’s 1 is a placeholder', () => {
    const translator = new MessagesStreamTranslator({ ...relabel, clientWantsUsage: true });
    const out = [
      start({ input_tokens: 100, output_tokens: 1 }),
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: 'Hello there' } },
      { type: 'message_delta', delta: { stop_reason: 'end_turn' } },
      { type: 'message_stop' },
    ].flatMap((event) => translator.translate(JSON.stringify(event)));
    expect(translator.finished).toBe(true);
    // The relay then bills its own count of the output, with the prompt as message_start counted it.
    expect(out.some((e) => e.usage !== null || e.usageOnly)).toBe(false);
    expect(translator.promptUsage).toMatchObject({ promptTokens: 100 });
  });

  it('streams tool_use blocks as tool-call deltas indexed by tool call, not by content block', () => {
    const { chunks } = translate([
      start(),
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: 'Let me check.' } },
      { type: 'content_block_stop', index: 0 },
      {
        type: 'content_block_start',
        index: 1,
        content_block: { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} },
      },
      { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '' } },
      {
        type: 'content_block_delta',
        index: 1,
        delta: { type: 'input_json_delta', partial_json: '{"city":' },
      },
      {
        type: 'content_block_delta',
        index: 1,
        delta: { type: 'input_json_delta', partial_json: '"Paris"}' },
      },
      { type: 'content_block_stop', index: 1 },
      { type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 9 } },
      { type: 'message_stop' },
    ]);
    const deltas = chunks.map((c) => (c.choices as { delta: unknown }[])[0]?.delta);
    expect(deltas.slice(1, 5)).toEqual([
      { content: 'Let me check.' },
      {
        tool_calls: [
          { index: 0, id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '' } },
        ],
      },
      { tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] },
    ]);
    expect(chunks[5]).toMatchObject({ choices: [{ finish_reason: 'tool_calls' }] });
  });

  it('gives a tool called with no arguments "{}" as its arguments, as OpenAI does, not ""', () => {
    const { chunks } = translate([
      start(),
      {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'tool_use', id: 'toolu_n', name: 'get_time', input: {} },
      },
      { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '' } },
      { type: 'content_block_stop', index: 0 },
      { type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 3 } },
      { type: 'message_stop' },
    ]);
    const args = chunks
      .flatMap(
        (c) => (c.choices as { delta: { tool_calls?: { function: { arguments?: string } }[] } }[]) ?? [],
      )
      .flatMap((choice) => choice.delta.tool_calls ?? [])
      .map((call) => call.function.arguments ?? '')
      .join('');
    expect(args).toBe('{}');
    expect(JSON.parse(args)).toEqual({});
  });

  it('holds the role chunk until the first content: message_start and ping commit nothing', () => {
    const translator = new MessagesStreamTranslator({ ...relabel, clientWantsUsage: false });
    expect(translator.translate(JSON.stringify(start()))).toEqual([]);
    expect(translator.translate(JSON.stringify({ type: 'ping' }))).toEqual([]);
    const first = translator.translate(
      JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } }),
    );
    expect(
      first.map((e) => (JSON.parse(e.data) as { choices: { delta: unknown }[] }).choices[0]?.delta),
    ).toEqual([{ role: 'assistant', content: '' }, { content: 'Hi' }]);
    // The role chunk goes out once.
    expect(translator.translate(JSON.stringify({ type: 'content_block_stop', index: 0 }))).toEqual([]);
  });

  it('commits on any content block start, a thinking one included (the thinking may take long)', () => {
    const { chunks } = translate([
      start(),
      { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } },
    ]);
    expect(chunks).toEqual([
      expect.objectContaining({
        choices: [expect.objectContaining({ delta: { role: 'assistant', content: '' } })],
      }),
    ]);
  });

  it('relays thinking as reasoning_content, its text counted as output; ping, signatures, block stops yield nothing', () => {
    const { out, chunks } = translate([
      start(),
      { type: 'ping' },
      { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } },
      {
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'thinking_delta', thinking: 'Let me "think"' },
      },
      { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'x' } },
      { type: 'content_block_stop', index: 0 },
      { type: 'content_block_start', index: 1, content_block: { type: 'redacted_thinking', data: 'opaque' } },
      { type: 'content_block_stop', index: 1 },
    ]);
    expect(chunks.map((c) => (c.choices as { delta: unknown }[])[0]?.delta)).toEqual([
      { role: 'assistant', content: '' },
      { reasoning_content: 'Let me "think"' },
    ]);
    // As written in the chunk (JSON string contents), as every output piece is.
    expect(out.map((e) => e.output)).toEqual([[], ['Let me \\"think\\"']]);
  });

  it.each([
    ['overloaded_error', 'overloaded'],
    ['rate_limit_error', 'rate_limited'],
    ['api_error', 'server_error'],
  ])(
    'throws an error event (%s) before any content as a failure of kind %s, nothing yet given out',
    (type, kind) => {
      const translator = new MessagesStreamTranslator({ ...relabel, clientWantsUsage: false });
      const given = [start(), { type: 'ping' }].flatMap((e) => translator.translate(JSON.stringify(e)));
      expect(given).toEqual([]);
      const failure = rejectedWith(() =>
        translator.translate(JSON.stringify({ type: 'error', error: { type, message: 'Overloaded' } })),
      );
      expect(failure.kind).toBe(kind);
      expect(failure.upstreamError?.message).toBe('Overloaded');
    },
  );

  it('sends no usage chunk when the upstream reported no usage', () => {
    const { out, finished } = translate([
      { type: 'message_start', message: { id: 'msg_s' } },
      { type: 'message_stop' },
    ]);
    expect(finished).toBe(true);
    expect(out).toHaveLength(1);
  });

  it('throws a protocol fault for an event that is not JSON', () => {
    const translator = new MessagesStreamTranslator({ ...relabel, clientWantsUsage: false });
    expect(rejectedWith(() => translator.translate('{oops')).kind).toBe('protocol');
  });
});
