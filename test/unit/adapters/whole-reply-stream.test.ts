import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { WholeBody } from '#adapters/upstream/http.ts';
import { OpenAiCompatibleChat, outputOf } from '#adapters/upstream/openai-compatible.ts';
import type { OpenAiHttp, OpenAiPost } from '#adapters/upstream/openai-http.ts';
import { chatCompletionOf, KeptBody, WholeReplyStream } from '#adapters/upstream/whole-reply-stream.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import type { ChatStreamEvent } from '#core/upstream.ts';
import { deployment } from '#test/fixtures.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';

/**
 * A whole chat.completion (from an upstream that does not stream) served as the stream the client asked for: the
 * chunks OpenAI would have sent, the usage-only chunk last, and the output the relay counts when it must bill on
 * its own count.
 */

const completion = (over: Record<string, unknown> = {}): Record<string, unknown> => ({
  id: 'chatcmpl-w',
  object: 'chat.completion',
  created: 42,
  model: 'famA-v4.1-flash',
  system_fingerprint: 'fp_9',
  choices: [
    {
      index: 0,
      message: { role: 'assistant', content: 'Hello "world"\n' },
      logprobs: null,
      finish_reason: 'stop',
    },
  ],
  usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 },
  ...over,
});

const eventsOf = async (
  body: Record<string, unknown>,
  clientWantsUsage = false,
): Promise<ChatStreamEvent[]> => {
  const events: ChatStreamEvent[] = [];
  // As the adapter makes one: from the reply chatCompletionOf took.
  const reply = chatCompletionOf(body, String(body.model), Date.now);
  for await (const event of new WholeReplyStream(reply, clientWantsUsage)) events.push(event);
  return events;
};

/** The relay's pieces of a streamed chunk, in any order (only their sum is counted). */
const sameOutput = (event: ChatStreamEvent | undefined) =>
  expect([...(event?.output ?? [])].sort()).toEqual([...outputOf(event?.data ?? '')].sort());

interface Chunk extends Record<string, unknown> {
  choices: { index: number; delta: unknown; finish_reason: string | null }[];
}
const chunks = (events: readonly ChatStreamEvent[]) => events.map((e) => JSON.parse(e.data) as Chunk);

describe('a whole reply served as a stream', () => {
  it("opens with the role, carries the text in one delta, finishes, and ends with the usage-only chunk, each chunk OpenAI's", async () => {
    const events = await eventsOf(completion());
    const parsed = chunks(events);
    for (const chunk of parsed) {
      expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
      expect(chunk).toMatchObject({
        id: 'chatcmpl-w',
        object: 'chat.completion.chunk',
        created: 42,
        model: 'famA-v4.1-flash',
        system_fingerprint: 'fp_9',
      });
    }
    expect(parsed.map((c) => c.choices)).toEqual([
      [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
      [{ index: 0, delta: { content: 'Hello "world"\n' }, logprobs: null, finish_reason: null }],
      [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }],
      [],
    ]);
    expect(parsed[3]?.usage).toEqual({ prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 });
    // The client did not ask for usage: no other chunk has the field, as the relay strips it.
    expect(parsed.slice(0, 3).some((c) => 'usage' in c)).toBe(false);
    expect(events.map((e) => e.usageOnly)).toEqual([false, false, false, true]);
    expect(events[3]?.usage).toMatchObject({ promptTokens: 9, completionTokens: 4, source: 'upstream' });
    // The output as the relay finds it in a streamed chunk: JSON string contents, escapes as written.
    expect(events[1]?.output).toEqual(['Hello \\"world\\"\\n']);
    for (const event of events) sameOutput(event);
  });

  it('gives tool calls the index a streamed call has, and counts their names and arguments', async () => {
    const call = {
      id: 'call_1',
      type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
    };
    // An index an upstream put on its call is not the streamed call's place.
    const second = {
      index: 7,
      id: 'call_2',
      type: 'function',
      function: { name: 'get_time', arguments: '{}' },
    };
    const events = await eventsOf(
      completion({
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: null, refusal: null, tool_calls: [call, second] },
            finish_reason: 'tool_calls',
          },
        ],
      }),
    );
    const parsed = chunks(events);
    for (const chunk of parsed) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
    expect(parsed[1]?.choices[0]).toEqual({
      index: 0,
      delta: {
        tool_calls: [
          { index: 0, ...call },
          { ...second, index: 1 },
        ],
      },
      logprobs: null,
      finish_reason: null,
    });
    expect(parsed[2]?.choices[0]?.finish_reason).toBe('tool_calls');
    sameOutput(events[1]);
    expect(events[1]?.output).toEqual(['get_weather', '{\\"city\\":\\"Oslo\\"}', 'get_time', '{}']);
  });

  it('opens every choice of n > 1 in the first chunk, then each choice its own output, logprobs and finish', async () => {
    const logprobs = {
      content: [{ token: 'A', logprob: -0.1, bytes: [65], top_logprobs: [] }],
      refusal: null,
    };
    const events = await eventsOf(
      completion({
        choices: [
          { index: 0, message: { role: 'assistant', content: 'A' }, logprobs, finish_reason: 'stop' },
          {
            index: 1,
            message: { role: 'assistant', content: 'B', reasoning_content: 'think', reasoning: 'think' },
            logprobs: null,
            finish_reason: 'length',
          },
        ],
      }),
    );
    const parsed = chunks(events);
    for (const chunk of parsed) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
    expect(parsed[0]?.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(parsed.slice(1, -1).map((c) => c.choices)).toEqual([
      [{ index: 0, delta: { content: 'A' }, logprobs, finish_reason: null }],
      [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }],
      [
        {
          index: 1,
          delta: { content: 'B', reasoning_content: 'think', reasoning: 'think' },
          logprobs: null,
          finish_reason: null,
        },
      ],
      [{ index: 1, delta: {}, logprobs: null, finish_reason: 'length' }],
    ]);
    // The same reasoning under both names is counted once, as the relay counts it.
    expect(events[3]?.output).toEqual(['B', 'think']);
    sameOutput(events[3]);
  });

  it('sends no usage chunk for a reply whose usage cannot be read: the relay bills its own count', async () => {
    for (const usage of [undefined, null, { prompt_tokens: 3 }]) {
      const events = await eventsOf(completion({ usage }));
      expect(events.some((e) => e.usageOnly || e.usage !== null)).toBe(false);
      expect(events.flatMap((e) => e.output)).toEqual(['Hello \\"world\\"\\n']);
    }
  });

  it('gives every other chunk "usage": null for a client that asked for usage, as OpenAI does', async () => {
    const parsed = chunks(await eventsOf(completion(), true));
    for (const chunk of parsed) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
    expect(parsed.map((c) => c.usage)).toEqual([
      null,
      null,
      null,
      { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 },
    ]);
  });

  it('is whole: its first event came when the reply was', () => {
    expect(new WholeReplyStream(completion(), false).whole).toBe(true);
  });
});

describe('what is a whole reply', () => {
  it('is relabelled with the public model', () => {
    expect(chatCompletionOf(completion({ model: 'upstream-name' }), 'svc-public', Date.now).model).toBe(
      'svc-public',
    );
  });

  it('is given what OpenAI requires of a completion where an upstream left it out, and keeps its own', async () => {
    const call = { id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } };
    const filled = chatCompletionOf(
      completion({
        id: undefined,
        object: undefined,
        created: '42',
        choices: [
          { message: { content: 'Hi' } },
          { index: 1, message: { tool_calls: [] }, finish_reason: 'length' },
          { message: { tool_calls: [call] } },
        ],
      }),
      'm',
      () => 1_764_000_000_999,
    );
    expect(filled.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(filled.object).toBe('chat.completion');
    expect(filled.created).toBe(1_764_000_000);
    expect(filled.choices).toEqual([
      {
        index: 0,
        message: { role: 'assistant', content: 'Hi', refusal: null },
        logprobs: null,
        finish_reason: 'stop',
      },
      {
        index: 1,
        message: { role: 'assistant', content: null, refusal: null, tool_calls: [] },
        logprobs: null,
        finish_reason: 'length',
      },
      {
        index: 2,
        message: { role: 'assistant', content: null, refusal: null, tool_calls: [call] },
        logprobs: null,
        // A reply that calls tools and gives no reason finished to call them.
        finish_reason: 'tool_calls',
      },
    ]);
    expect(schemaErrors('CreateChatCompletionResponse', filled)).toBe('');
    for (const chunk of chunks(await eventsOf(filled)))
      expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
    expect(chatCompletionOf(completion(), 'm', Date.now)).toMatchObject({ id: 'chatcmpl-w', created: 42 });
  });

  it.each([
    ['no choices', { choices: [] }, 'protocol'],
    ['a choice without a message', { choices: [{ index: 0, finish_reason: 'stop' }] }, 'protocol'],
    ['a message that is a list', { choices: [{ index: 0, message: [], finish_reason: 'stop' }] }, 'protocol'],
    ['not a completion at all', { choices: undefined, data: [] }, 'protocol'],
    ['an error inside the 200', { error: { message: 'upstream busy' } }, 'server_error'],
    [
      'a choice finished with "error"',
      { choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: 'error' }] },
      'server_error',
    ],
  ])('refuses %s: another deployment may answer', (_name, over, kind) => {
    let thrown: unknown;
    try {
      chatCompletionOf(completion(over), 'm', Date.now);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(UpstreamFailure);
    expect((thrown as UpstreamFailure).kind).toBe(kind);
  });
});

describe('a body kept while it is read', () => {
  const body = async function* (...parts: string[]) {
    for (const part of parts) yield Buffer.from(part);
  };
  const readAll = async (kept: KeptBody) => {
    const seen: string[] = [];
    for await (const chunk of kept) seen.push(Buffer.from(chunk).toString());
    return seen;
  };

  it('passes every chunk on, and keeps them all', async () => {
    const kept = new KeptBody(body('{"a":', '1}'), 100);
    expect(await readAll(kept)).toEqual(['{"a":', '1}']);
    expect(kept.bytes().toString()).toBe('{"a":1}');
  });

  it('keeps nothing past its limit: the body is then too large to be a reply', async () => {
    const kept = new KeptBody(body('12345', '67890'), 8);
    expect(await readAll(kept)).toEqual(['12345', '67890']);
    expect(() => kept.bytes()).toThrow(UpstreamFailure);
  });

  it('keeps nothing once let go (an event stream), and still passes it on', async () => {
    const kept = new KeptBody(body('data: {}\n\n', 'data: [DONE]\n\n'), 100);
    const iterator = kept[Symbol.asyncIterator]();
    await iterator.next();
    kept.letGo();
    expect((await iterator.next()).value?.toString()).toBe('data: [DONE]\n\n');
    expect(() => kept.bytes()).toThrow();
  });
});

describe("the adapter's memory of a deployment that does not stream", () => {
  /** An upstream that always answers whole, as the adapter's transport sees it; what each call asked for. */
  const upstream = (reply: Record<string, unknown> = completion()) => {
    const asked: { stream: boolean; timeoutMs: number }[] = [];
    const http = {
      firstByteTimeoutMs: () => 30_000,
      completionTimeoutMs: () => 180_000,
      post: async (call: { body: Record<string, unknown> }, request: OpenAiPost) => {
        asked.push({ stream: call.body.stream === true, timeoutMs: request.headersTimeoutMs });
        const bytes = Buffer.from(JSON.stringify(reply));
        return {
          statusCode: 200,
          headers: { 'content-type': 'application/json' },
          body: request.wholeBodyLimitBytes === undefined ? Readable.from([bytes]) : new WholeBody(bytes),
        };
      },
    } as unknown as OpenAiHttp;
    return { http, asked };
  };
  const call = {
    deployment: deployment({ id: 'whole' }),
    keyIndex: 0,
    body: { model: 'm', messages: [], stream: true, stream_options: { include_usage: true } },
    publicModel: 'famA-v4.1-flash',
    clientWantsUsage: false,
  };

  it('asks for whole replies for 10 minutes, then to stream again within the time a whole reply may take', async () => {
    const { http, asked } = upstream();
    let now = 0;
    const chat = new OpenAiCompatibleChat(http, () => now);
    expect(chat.streamMode(call.deployment)).toBe('stream');
    expect((await chat.stream(call)).whole).toBe(true);
    expect(chat.streamMode(call.deployment)).toBe('whole');
    now += 10 * 60_000 - 1;
    expect((await chat.stream(call)).whole).toBe(true);
    now += 1;
    expect(chat.streamMode(call.deployment)).toBe('recheck');
    expect((await chat.stream(call)).whole).toBe(true);
    now += 1;
    await chat.stream(call);
    expect(asked).toEqual([
      // Asked to stream, under a first event's timeout.
      { stream: true, timeoutMs: 30_000 },
      // Marked: asked for the whole reply, under a whole reply's.
      { stream: false, timeoutMs: 180_000 },
      // The mark ran out: asked to stream again, but given a whole reply's time, as it may answer whole again…
      { stream: true, timeoutMs: 180_000 },
      // …which it did: marked again.
      { stream: false, timeoutMs: 180_000 },
    ]);
  });

  it('dates a reply that came undated by its own clock, whole or as a stream', async () => {
    const now = () => 1_764_000_123_456;
    const chat = new OpenAiCompatibleChat(upstream(completion({ created: undefined })).http, now);
    expect((await chat.complete({ ...call, body: { model: 'm', messages: [] } })).body.created).toBe(
      1_764_000_123,
    );
    const events: ChatStreamEvent[] = [];
    for await (const event of await chat.stream(call)) events.push(event);
    expect(chunks(events).every((c) => c.created === 1_764_000_123)).toBe(true);
  });
});
