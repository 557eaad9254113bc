import { performance } from 'node:perf_hooks';
import { describe, expect, test } from 'vitest';
import { TOOL_CALL_COMPLETION_TOKENS } from '#sim/chat.ts';
import { countMessagesPromptTokens } from '#sim/messages.ts';
import { cachedTokensFor } from '#sim/prompt-cache.ts';
import { countTextTokens } from '#sim/tokens.ts';
import { isSocketError, readText, settle } from './client.ts';
import { useSimulator } from './use-simulator.ts';

const CACHING_MODEL = 'claude-cached';

const sim = useSimulator({ promptCachingModels: [CACHING_MODEL] });

type Json = Record<string, unknown>;

interface Usage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  output_tokens: number;
}

interface Message {
  id: string;
  type: string;
  role: string;
  model: string;
  content: Json[];
  stop_reason: string;
  stop_sequence: null;
  usage: Usage;
}

const body = (content: unknown = 'hello', extra: Json = {}): Json => ({
  model: 'claude-sim',
  max_tokens: 1024,
  messages: [{ role: 'user', content }],
  ...extra,
});

interface Options {
  provider?: string;
  /** `null` leaves the header out. */
  key?: string | null;
  version?: string | null;
  headers?: Record<string, string>;
}

const postMessages = (payload: unknown, options: Options = {}): Promise<Response> => {
  const prefix = options.provider === undefined ? '' : `/p/${options.provider}`;
  const key = options.key === undefined ? 'sk-ant-test' : options.key;
  const version = options.version === undefined ? '2023-06-01' : options.version;
  return fetch(`${sim().url}${prefix}/v1/messages`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(key === null ? {} : { 'x-api-key': key }),
      ...(version === null ? {} : { 'anthropic-version': version }),
      ...options.headers,
    },
    body: typeof payload === 'string' ? payload : JSON.stringify(payload),
  });
};

const message = async (payload: unknown, options?: Options): Promise<Message> => {
  const response = await postMessages(payload, options);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('application/json');
  return (await response.json()) as Message;
};

interface NamedEvent {
  event: string;
  data: Json;
}

/** Reads an Anthropic event stream: each event's `event:` name and parsed `data:`, and a socket error. */
const readEvents = async (response: Response): Promise<{ events: NamedEvent[]; error: unknown }> => {
  const { text, error } = await readText(response);
  const frames = text.split('\n\n');
  frames.pop(); // only complete events count
  const events = frames.map((frame) => {
    const lines = frame.split('\n');
    const event = lines.find((l) => l.startsWith('event: '))?.slice(7) ?? '';
    const data = lines.find((l) => l.startsWith('data: '))?.slice(6) ?? 'null';
    return { event, data: JSON.parse(data) as Json };
  });
  return { events, error };
};

const streamed = async (payload: Json, options?: Options) => {
  const response = await postMessages({ ...payload, stream: true }, options);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('text/event-stream');
  return readEvents(response);
};

const textOf = (m: Message): string => m.content.map((b) => b.text).join('');

describe('POST /v1/messages', () => {
  test('answers a Messages response with deterministic text and exact usage', async () => {
    const payload = body('Tell me something.');
    const first = await message(payload);
    expect(first).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'claude-sim',
      stop_reason: 'end_turn',
      stop_sequence: null,
    });
    expect(first.id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(first.content).toEqual([{ type: 'text', text: expect.any(String) }]);
    const words = textOf(first).split(' ');
    expect(words.length).toBeGreaterThanOrEqual(8);
    expect(first.usage).toEqual({
      input_tokens: countMessagesPromptTokens(payload),
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      output_tokens: words.length,
    });
    expect(textOf(await message(payload))).toBe(textOf(first));
  });

  test('counts the system prompt, text, images and tools into input_tokens', async () => {
    const payload = body(
      [
        { type: 'text', text: 'What is in this picture?' },
        { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
      ],
      {
        system: 'You are terse.',
        tools: [{ name: 'lookup', input_schema: { type: 'object', properties: {} } }],
      },
    );
    const reply = await message(payload);
    expect(reply.usage.input_tokens).toBe(countMessagesPromptTokens(payload));
    // Priming 3; the system prompt as a message (3 + text); the user message (3 + text + 85 per image); tools.
    expect(reply.usage.input_tokens).toBe(
      3 +
        (3 + countTextTokens('You are terse.')) +
        (3 + countTextTokens('What is in this picture?') + 85) +
        countTextTokens(JSON.stringify(payload.tools)),
    );
  });

  test('stops at max_tokens with stop_reason max_tokens', async () => {
    const reply = await message(body('hello', { max_tokens: 3 }));
    expect(reply.stop_reason).toBe('max_tokens');
    expect(textOf(reply).split(' ')).toHaveLength(3);
    expect(reply.usage.output_tokens).toBe(3);
  });

  test('calls the forced tool when tool_choice is any or names a tool', async () => {
    const tools = [
      { name: 'get_weather', input_schema: { type: 'object', properties: {} } },
      { name: 'ping', input_schema: { type: 'object', properties: {} } },
    ];
    const any = await message(body('weather?', { tools, tool_choice: { type: 'any' } }));
    expect(any.stop_reason).toBe('tool_use');
    expect(any.content).toEqual([
      { type: 'tool_use', id: expect.stringMatching(/^toolu_/), name: 'get_weather', input: {} },
    ]);
    expect(any.usage.output_tokens).toBe(TOOL_CALL_COMPLETION_TOKENS);
    const named = await message(body('weather?', { tools, tool_choice: { type: 'tool', name: 'ping' } }));
    expect(named.content[0]).toMatchObject({ type: 'tool_use', name: 'ping' });
    const auto = await message(body('weather?', { tools, tool_choice: { type: 'auto' } }));
    expect(auto.stop_reason).toBe('end_turn');
  });

  test('reports a cache write, then a cache read, for a repeated long prompt of a caching model', async () => {
    const payload = body('lorem ipsum dolor sit amet '.repeat(300), { model: CACHING_MODEL });
    const total = countMessagesPromptTokens(payload);
    expect(total).toBeGreaterThan(1024);
    const cached = cachedTokensFor(total);
    const first = await message(payload);
    expect(first.usage).toMatchObject({
      input_tokens: total - cached,
      cache_creation_input_tokens: cached,
      cache_read_input_tokens: 0,
    });
    const second = await message(payload);
    expect(second.usage).toMatchObject({
      input_tokens: total - cached,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: cached,
    });
  });

  test('streams Anthropic’s named event sequence, with the same text and usage as a whole reply', async () => {
    const payload = body('Stream this please.');
    const whole = await message(payload);
    const { events, error } = await streamed(payload);
    expect(error).toBeNull();
    for (const e of events) expect(e.event).toBe(e.data.type);
    const names = events.map((e) => e.event);
    expect(names.slice(0, 3)).toEqual(['message_start', 'content_block_start', 'ping']);
    expect(names.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    const deltas = events.filter((e) => e.event === 'content_block_delta');
    expect(deltas).toHaveLength(whole.usage.output_tokens);
    expect(deltas.map((e) => (e.data.delta as { text: string }).text).join('')).toBe(textOf(whole));
    expect(events[0]?.data.message).toMatchObject({ usage: { ...whole.usage, output_tokens: 1 } });
    expect(events.at(-2)?.data).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { output_tokens: whole.usage.output_tokens },
    });
  });

  test('streams a forced tool call as a tool_use block with input_json_delta', async () => {
    const tools = [{ name: 'get_weather', input_schema: { type: 'object', properties: {} } }];
    const { events } = await streamed(body('weather?', { tools, tool_choice: { type: 'any' } }));
    expect(events[1]?.data).toMatchObject({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'tool_use', name: 'get_weather', input: {} },
    });
    const json = events
      .filter((e) => e.event === 'content_block_delta')
      .map((e) => (e.data.delta as { type: string; partial_json: string }).partial_json)
      .join('');
    expect(json).toBe('{}');
    expect(events.at(-2)?.data).toMatchObject({ delta: { stop_reason: 'tool_use' } });
  });

  test('is served under /p/<provider>/ and records the x-api-key as the call’s key', async () => {
    await message(body(), { provider: 'sim-c', key: 'sim-c-key' });
    expect(sim().calls('sim-c')).toEqual([
      expect.objectContaining({ path: '/v1/messages', model: 'claude-sim', key: 'sim-c-key', fault: null }),
    ]);
  });
});

describe('authentication and validation, in Anthropic’s error shape', () => {
  test('a missing x-api-key is a 401 authentication_error (a bearer token is not enough)', async () => {
    const response = await postMessages(body(), { key: null, headers: { authorization: 'Bearer sk-test' } });
    expect(response.status).toBe(401);
    expect(await response.json()).toEqual({
      type: 'error',
      error: { type: 'authentication_error', message: 'x-api-key header is required' },
    });
  });

  test('a missing anthropic-version is a 400 invalid_request_error, as on the real API', async () => {
    const response = await postMessages(body(), { version: null });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', message: 'anthropic-version: header is required' },
    });
  });

  test.each([
    ['max_tokens', { model: 'm', messages: [{ role: 'user', content: 'x' }] }, /max_tokens/],
    ['model', { max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }, /model/],
    ['messages', { model: 'm', max_tokens: 5, messages: [] }, /messages/],
  ])('a request without %s is a 400 invalid_request_error', async (_, payload, message) => {
    const response = await postMessages(payload);
    expect(response.status).toBe(400);
    const error = (await response.json()) as { type: string; error: { type: string; message: string } };
    expect(error.type).toBe('error');
    expect(error.error.type).toBe('invalid_request_error');
    expect(error.error.message).toMatch(message);
  });

  test('a malformed directive is a 400 in Anthropic’s shape too', async () => {
    const response = await postMessages(body('[[sim: nonsense=1]]'));
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
  });
});

describe('fault injection, shared with chat', () => {
  test('overloaded answers 529 with exactly Anthropic’s overloaded_error body', async () => {
    sim().setFaults('sim-c', { error: 'overloaded' });
    const response = await postMessages(body(), { provider: 'sim-c' });
    expect(response.status).toBe(529);
    expect(await response.text()).toBe(
      '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
    );
  });

  test('server_error answers 500 api_error; unauthorized answers 401 authentication_error', async () => {
    sim().setFaults('sim-c', { error: 'server_error' });
    const failed = await postMessages(body(), { provider: 'sim-c' });
    expect(failed.status).toBe(500);
    expect(await failed.json()).toEqual({
      type: 'error',
      error: { type: 'api_error', message: 'Internal server error' },
    });
    sim().setFaults('sim-c', { error: 'unauthorized', keys: ['bad-key'] });
    const refused = await postMessages(body(), { provider: 'sim-c', key: 'bad-key' });
    expect(refused.status).toBe(401);
    expect(await refused.json()).toMatchObject({ error: { type: 'authentication_error' } });
    // The keyed fault matches the x-api-key: another key is served.
    expect((await postMessages(body(), { provider: 'sim-c', key: 'good-key' })).status).toBe(200);
  });

  test('drop_before closes the connection without any response', async () => {
    sim().setFaults('sim-c', { error: 'drop_before' });
    const { error } = await settle(postMessages(body(), { provider: 'sim-c' }));
    expect(isSocketError(error) || error instanceof TypeError).toBe(true);
  });

  test('drop_mid on a stream sends dropAfterChunks events, then fails without message_stop', async () => {
    sim().setFaults('sim-c', { error: 'drop_mid', dropAfterChunks: 4 });
    const { events, error } = await streamed(body(), { provider: 'sim-c' });
    expect(events.map((e) => e.event)).toEqual([
      'message_start',
      'content_block_start',
      'ping',
      'content_block_delta',
    ]);
    expect(isSocketError(error)).toBe(true);
  });

  test('error_mid on a stream sends dropAfterChunks events, then an error event, and ends cleanly', async () => {
    sim().setFaults('sim-c', { error: 'error_mid', dropAfterChunks: 2 });
    const { events, error } = await streamed(body(), { provider: 'sim-c' });
    expect(error).toBeNull();
    expect(events.map((e) => e.event)).toEqual(['message_start', 'content_block_start', 'error']);
    expect(events.at(-1)?.data).toEqual({
      type: 'error',
      error: { type: 'overloaded_error', message: 'Overloaded' },
    });
  });

  test('error_mid on a whole reply is the server error', async () => {
    sim().setFaults('sim-c', { error: 'error_mid' });
    expect((await postMessages(body(), { provider: 'sim-c' })).status).toBe(500);
  });

  test('drop_mid on a whole reply sends 200 and part of the body before failing', async () => {
    sim().setFaults('sim-c', { error: 'drop_mid' });
    const response = await postMessages(body(), { provider: 'sim-c' });
    expect(response.status).toBe(200);
    const { text, error } = await readText(response);
    expect(isSocketError(error)).toBe(true);
    expect(() => JSON.parse(text)).toThrow();
  });

  test('an inline directive in a text block forces the length and spaces out the events', async () => {
    const payload = body([{ type: 'text', text: 'go [[sim: completion_tokens=4 chunk_delay_ms=40]]' }]);
    const started = performance.now();
    const { events } = await streamed(payload);
    // message_start, block start, ping, 4 deltas, block stop, message_delta, message_stop: 10 events.
    expect(events).toHaveLength(10);
    expect(performance.now() - started).toBeGreaterThanOrEqual(9 * 40 - 20);
    expect(events.at(-2)?.data).toMatchObject({ usage: { output_tokens: 4 } });
  });

  test('a directive in the system prompt and the x-sim headers apply too', async () => {
    const viaSystem = await postMessages(body('hi', { system: '[[sim: fault=server_error]]' }));
    expect(viaSystem.status).toBe(500);
    const viaHeader = await postMessages(body(), { headers: { 'x-sim-fault': 'overloaded' } });
    expect(viaHeader.status).toBe(529);
  });

  test('firstByteDelayMs holds back the response headers', async () => {
    sim().setFaults('sim-c', { firstByteDelayMs: 150 });
    const started = performance.now();
    const response = await postMessages(body(), { provider: 'sim-c' });
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    expect(response.status).toBe(200);
  });

  test('omit_usage leaves usage out of a whole reply and out of the stream’s events', async () => {
    sim().setFaults('sim-c', { omitUsage: true });
    const whole = (await (await postMessages(body(), { provider: 'sim-c' })).json()) as Json;
    expect(whole).not.toHaveProperty('usage');
    const { events } = await streamed(body(), { provider: 'sim-c' });
    expect(events[0]?.data.message).not.toHaveProperty('usage');
    expect(events.at(-2)?.data).not.toHaveProperty('usage');
  });

  test('faults are recorded in the call log', async () => {
    sim().setFaults('sim-c', { error: 'overloaded', count: 1 });
    await postMessages(body(), { provider: 'sim-c' });
    await postMessages(body(), { provider: 'sim-c' });
    expect(
      sim()
        .calls('sim-c')
        .map((c) => c.fault),
    ).toEqual(['overloaded', null]);
  });
});
