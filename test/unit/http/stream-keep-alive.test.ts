import { describe, expect, it, vi } from 'vitest';
import { CallRecorder } from '#core/call-recorder.ts';
import { prepareChat } from '#core/chat.ts';
import type { ChatStream, ChatStreamEvent } from '#core/upstream.ts';
import { chatEventStream } from '#http/chat-stream.ts';
import { chatEvent, chatChunk as chunk } from '#test/chat-chunks.ts';
import { chatModel, wordCounter } from '#test/fixtures.ts';
import { stallingUpstream } from '#test/stalling.ts';

/**
 * CloudFront cuts a response that sends nothing for 60 s — between packets too — and a model that reasons before
 * it writes can be silent longer. A stream sends an SSE comment whenever it has sent nothing for a while.
 */

/** An upstream that pauses `pauseMs` before each event after the first, as a model thinking does. */
const pausingUpstream = (chunks: readonly string[], pauseMs: number): ChatStream => ({
  close: () => {},
  async *[Symbol.asyncIterator](): AsyncGenerator<ChatStreamEvent> {
    for (const [i, data] of chunks.entries()) {
      if (i > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs));
      yield chatEvent(data);
    }
  },
});

const REPLY = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Hello there' }),
  chunk({}, 'stop'),
];

const prepared = () =>
  prepareChat(
    { model: 'famA-test', messages: [{ role: 'user', content: 'think hard' }], stream: true },
    chatModel(),
    wordCounter,
  );

const read = async (stream: ChatStream, keepAliveMs: number) => {
  const call = new CallRecorder('chat.completions', 'req_keepalive', { now: () => Date.now() });
  let text = '';
  for await (const piece of chatEventStream(stream, prepared(), call, wordCounter, undefined, keepAliveMs))
    text += String(piece);
  return { text, call };
};

describe('a stream that goes quiet', () => {
  it('sends an SSE comment while the upstream is silent, and the same events and bill as without', async () => {
    const quiet = await read(pausingUpstream(REPLY, 120), 25);
    const events = quiet.text.split('\n\n').filter((e) => e !== '');
    // Comments between the events, never inside one; the events themselves as a prompt stream sends them.
    expect(events.filter((e) => e === ': keep-alive').length).toBeGreaterThanOrEqual(2);
    const loud = await read(pausingUpstream(REPLY, 0), 25);
    expect(events.filter((e) => e !== ': keep-alive')).toEqual(
      loud.text.split('\n\n').filter((e) => e !== ''),
    );
    expect(quiet.call.settlement().usage).toEqual(loud.call.settlement().usage);
    expect(quiet.call.settlement().outcome).toBe('success');
  });

  it('sends none when the upstream never pauses that long', async () => {
    const { text } = await read(pausingUpstream(REPLY, 0), 10_000);
    expect(text).not.toContain(': keep-alive');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  /** An upstream that sends its opening and first text, then thinks until it is closed. */
  const thinking = () => stallingUpstream<ChatStreamEvent>(REPLY.slice(0, 2).map(chatEvent), 2);

  it('still sees a client that leaves while only keep-alives flow: aborted, charged what it got, upstream closed', async () => {
    const upstream = thinking();
    const call = new CallRecorder('chat.completions', 'req_gone', { now: () => Date.now() });
    let text = '';
    for await (const piece of chatEventStream(upstream, prepared(), call, wordCounter, undefined, 20)) {
      text += String(piece);
      if (text.includes(': keep-alive')) break; // the client hangs up
    }
    // The hang-up reaches the relay as the body is destroyed, a few turns after the loop left it.
    await vi.waitFor(() =>
      expect(call.settlement()).toMatchObject({ outcome: 'client_aborted', usage: { completionTokens: 2 } }),
    );
    expect(upstream.closed).toBe(true);
  });

  it('ends at the call’s deadline with an error event while only keep-alives flow', async () => {
    const upstream = thinking();
    const call = new CallRecorder('chat.completions', 'req_cut', { now: () => Date.now() });
    call.endBy = Date.now() + 150;
    let text = '';
    for await (const piece of chatEventStream(upstream, prepared(), call, wordCounter, undefined, 20))
      text += String(piece);
    expect(text).toContain(': keep-alive');
    expect(text.trimEnd().split('\n\n').at(-1)).toMatch(/^data: \{"error":/);
    expect(upstream.closed).toBe(true);
    expect(call.settlement()).toMatchObject({
      outcome: 'client_aborted',
      fault: { detail: expect.stringMatching(/deadline/) },
    });
  });
});
