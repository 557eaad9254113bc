import { describe, expect, it, vi } from 'vitest';
import { MessagesStreamTranslator } from '#adapters/upstream/anthropic-translate.ts';
import { outputOf } from '#adapters/upstream/openai-compatible.ts';
import { CallRecorder } from '#core/call-recorder.ts';
import { prepareChat, promptCeiling } from '#core/chat.ts';
import type { ChatStream, ChatStreamEvent } from '#core/upstream.ts';
import { chatEventStream } from '#http/chat-stream.ts';
import { chatEvent, chatChunk as chunk } from '#test/chat-chunks.ts';
import { chatModel, wordCounter } from '#test/fixtures.ts';
import { stallingUpstream } from '#test/stalling.ts';

/**
 * A stream whose upstream reports no usage (or that ends early) is billed on our count of the output it relayed.
 * That count once took every chunk for one token and saw only `content`: a reply whose upstream sends many words
 * per chunk, or shows its reasoning (`reasoning_content`), was billed a fraction of what it produced — and a client
 * could abort a reasoning model's stream just before its usage report to get the reasoning for almost nothing.
 */

describe('the output a chunk carries (outputOf)', () => {
  it('takes text, shown reasoning, refusals and tool-call pieces, and not the opening empty content', () => {
    expect(outputOf(chunk({ role: 'assistant', content: '' }))).toEqual([]);
    expect(outputOf(chunk({ content: 'He said "hi" \\ twice' }))).toEqual(['He said \\"hi\\" \\\\ twice']);
    expect(outputOf(chunk({ reasoning_content: 'Let me think' }))).toEqual(['Let me think']);
    expect(outputOf(chunk({ reasoning: 'Hmm' }))).toEqual(['Hmm']);
    expect(outputOf(chunk({ refusal: 'No.' }))).toEqual(['No.']);
    expect(
      outputOf(
        chunk({
          tool_calls: [
            { index: 0, id: 't', type: 'function', function: { name: 'get_weather', arguments: '{"c' } },
          ],
        }),
      ),
    ).toEqual(['{\\"c', 'get_weather']);
    expect(outputOf(chunk({}, 'stop'))).toEqual([]);
  });

  it('counts reasoning sent under both its names once, and nothing outside the deltas', () => {
    expect(outputOf(chunk({ reasoning_content: 'Let me think', reasoning: 'Let me think' }))).toEqual([
      'Let me think',
    ]);
    // The whole message so far beside the delta (as Perplexity sends it) is not new output.
    const withMessage = JSON.stringify({
      id: 'c',
      choices: [
        { index: 0, delta: { content: ' world' }, message: { role: 'assistant', content: 'Hello world' } },
      ],
    });
    expect(outputOf(withMessage)).toEqual([' world']);
    // Every choice's delta (n > 1), a brace inside a string notwithstanding.
    const two = JSON.stringify({
      choices: [
        { index: 0, delta: { content: 'a } b' } },
        { index: 1, delta: { content: 'c' } },
      ],
    });
    expect(outputOf(two)).toEqual(['a } b', 'c']);
  });
});

/** An upstream that sends these chunks and ends (no usage report), or stalls after `stallAfter` of them. */
const upstreamOf = (chunks: readonly string[], stallAfter?: number): ChatStream =>
  stallingUpstream<ChatStreamEvent>(chunks.map(chatEvent), stallAfter);

const prepared = (maxTokens?: number) =>
  prepareChat(
    {
      model: 'famA-test',
      messages: [{ role: 'user', content: 'think, then answer' }],
      stream: true,
      ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
    },
    chatModel(),
    wordCounter,
  );

const REPLY = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ reasoning_content: 'The user wants a short answer,' }),
  chunk({ reasoning_content: ' so I keep it brief.\n' }),
  chunk({ content: 'Here is the answer in eight words, done.' }),
  chunk({}, 'stop'),
];

describe('a stream billed on our count', () => {
  it('counts every word it relayed, reasoning included, when the upstream reports no usage', async () => {
    const call = new CallRecorder('chat.completions', 'req_estimate', { now: () => Date.now() });
    const chat = prepared();
    let text = '';
    for await (const piece of chatEventStream(upstreamOf(REPLY), chat, call, wordCounter))
      text += String(piece);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    // 6 + 5 reasoning words and 8 words of text: 19, where one per content chunk counted 1.
    expect(call.settlement()).toMatchObject({
      outcome: 'success',
      usage: { promptTokens: chat.promptTokens, completionTokens: 19, source: 'estimated' },
    });
  });

  it('charges a client that leaves after the reasoning for the reasoning it was sent', async () => {
    const call = new CallRecorder('chat.completions', 'req_leaves', { now: () => Date.now() });
    // The opening and both reasoning chunks, then the model works on its answer while the client leaves.
    const body = chatEventStream(upstreamOf(REPLY, 3), prepared(), call, wordCounter);
    let text = '';
    for await (const piece of body) {
      text += String(piece);
      if (text.includes('brief')) break;
    }
    // The hang-up reaches the relay as the body is destroyed, a few turns after the loop left it.
    await vi.waitFor(() =>
      expect(call.settlement()).toMatchObject({ outcome: 'client_aborted', usage: { completionTokens: 11 } }),
    );
  });

  it('never counts past the completion cap the hold was sized on', async () => {
    const call = new CallRecorder('chat.completions', 'req_capped', { now: () => Date.now() });
    for await (const _ of chatEventStream(upstreamOf(REPLY), prepared(8), call, wordCounter)) {
      // read to the end
    }
    expect(call.settlement().usage?.completionTokens).toBe(8);
  });

  it('bills a report above the cap at the cap, and shows the report as sent to whoever logs it', async () => {
    const call = new CallRecorder('chat.completions', 'req_over', { now: () => Date.now() });
    const usage = {
      promptTokens: 9,
      completionTokens: 5_000_000,
      cachedPromptTokens: 0,
      reasoningTokens: 0,
      source: 'upstream' as const,
    };
    const events: ChatStreamEvent[] = [
      ...REPLY.map(chatEvent),
      { data: JSON.stringify({ id: 'c', choices: [], usage: {} }), usage, usageOnly: true, output: [] },
    ];
    const seen: number[] = [];
    const body = chatEventStream(stallingUpstream(events), prepared(8), call, wordCounter, (u) =>
      seen.push(u.completionTokens),
    );
    for await (const _ of body) {
      // read to the end
    }
    expect(seen).toEqual([5_000_000]);
    expect(call.settlement().usage).toMatchObject({ promptTokens: 9, completionTokens: 8 });
  });
});

/**
 * An upstream that sends these Anthropic events through the Messages translation, then ends (or, with `stall`, waits
 * as a model still working does), and tells the relay the prompt side of the usage reported so far, as the adapter's
 * stream does.
 */
const anthropicUpstream = (events: readonly object[], stall = false): ChatStream => {
  const translator = new MessagesStreamTranslator({
    publicModel: 'famA-test',
    created: 0,
    clientWantsUsage: false,
  });
  const chunks = events.flatMap((event) => translator.translate(JSON.stringify(event)));
  const upstream = stallingUpstream(chunks, stall ? chunks.length : undefined);
  return Object.assign(upstream, { promptUsage: () => translator.promptUsage });
};

const delta = (type: 'text_delta' | 'thinking_delta', text: string) => ({
  type: 'content_block_delta',
  index: 0,
  delta: type === 'text_delta' ? { type, text } : { type, thinking: text },
});

/** The call's settlement once the relay of `upstream` has been read to its end. */
const settledAfterReading = async (upstream: ChatStream, chat = prepared()) => {
  const call = new CallRecorder('chat.completions', 'req_anthropic', { now: () => Date.now() });
  for await (const _ of chatEventStream(upstream, chat, call, wordCounter)) {
    // read to the end: no final report
  }
  return call.settlement();
};

describe('an Anthropic stream billed on our count', () => {
  it('counts the thinking it relayed (Anthropic bills thinking as output)', async () => {
    // The thinking, then the stream ends with no usage report (as our relay sees a cut one).
    const upstream = anthropicUpstream([
      { type: 'message_start', message: { id: 'msg_1' } },
      { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } },
      delta('thinking_delta', 'The user wants a short answer,'),
      delta('thinking_delta', ' so I keep it brief.\n'),
    ]);
    // 6 + 5 words of thinking.
    expect(await settledAfterReading(upstream)).toMatchObject({
      usage: { completionTokens: 11, source: 'estimated' },
    });
  });

  it('bills a client that leaves before the final report the prompt as message_start counted it, cache reads cached', async () => {
    // Anthropic's input side up front: 3 new tokens, 900 read from the cache, 100 written to it.
    const usage = {
      input_tokens: 3,
      cache_read_input_tokens: 900,
      cache_creation_input_tokens: 100,
      output_tokens: 1,
    };
    const events = [
      { type: 'message_start', message: { id: 'msg_1', usage } },
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
      delta('text_delta', 'Here are four words'),
      delta('text_delta', ' and then more.'),
    ];
    // Then the model works on while the client leaves.
    const upstream = anthropicUpstream(events, true);
    // Our estimate of this prompt would be a handful of tokens, none of them cached.
    const chat = prepared();
    expect(chat.promptTokens).toBeLessThan(20);
    const call = new CallRecorder('chat.completions', 'req_cached_prompt', { now: () => Date.now() });
    const body = chatEventStream(upstream, chat, call, wordCounter);
    let relayed = '';
    for await (const piece of body) {
      relayed += String(piece);
      if (relayed.includes('more.')) break;
    }
    await vi.waitFor(() =>
      expect(call.settlement()).toMatchObject({
        outcome: 'client_aborted',
        usage: { promptTokens: 1003, cachedPromptTokens: 900, completionTokens: 7, source: 'estimated' },
      }),
    );
  });

  it('takes a prompt count of 0 from message_start for none (a proxy reporting the input side only at the end)', async () => {
    const chat = prepared();
    const upstream = anthropicUpstream([
      { type: 'message_start', message: { id: 'msg_1', usage: { input_tokens: 0, output_tokens: 0 } } },
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: 'Hi' } },
    ]);
    expect((await settledAfterReading(upstream, chat)).usage?.promptTokens).toBe(chat.promptTokens);
  });

  it('holds a prompt count from message_start to the prompt ceiling, as a final report would be', async () => {
    const chat = prepared();
    const upstream = anthropicUpstream([
      {
        type: 'message_start',
        message: { id: 'msg_1', usage: { input_tokens: 50_000_000, output_tokens: 1 } },
      },
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: 'Hi' } },
    ]);
    expect((await settledAfterReading(upstream, chat)).usage?.promptTokens).toBe(promptCeiling(chat));
  });
});
