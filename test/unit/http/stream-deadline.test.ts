import { describe, expect, it } from 'vitest';
import { CallRecorder } from '#core/call-recorder.ts';
import { prepareChat } from '#core/chat.ts';
import type { ChatStream, ChatStreamEvent } from '#core/upstream.ts';
import { chatEventStream } from '#http/chat-stream.ts';
import { chatModel, wordCounter } from '#test/fixtures.ts';

/**
 * Lambda kills an invocation at its timeout, the work after the response included: a stream still running then
 * would be neither charged nor recorded. The relay ends it first, at the call's deadline, so the invocation can
 * settle. Here an upstream sends one event and then nothing, as a model that stalls would.
 */

/** An upstream that sends one event, then waits until it is closed, and then fails as a closed socket does. */
const stalledUpstream = (): ChatStream & { closed: boolean } => {
  let release: () => void = () => {};
  const closedSignal = new Promise<void>((resolve) => {
    release = resolve;
  });
  const upstream = {
    closed: false,
    close() {
      upstream.closed = true;
      release();
    },
    async *[Symbol.asyncIterator](): AsyncGenerator<ChatStreamEvent> {
      yield {
        data: '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',
        usage: null,
        usageOnly: false,
        contentChunks: 0,
      };
      await closedSignal;
      throw new Error('socket closed');
    },
  };
  return upstream;
};

describe('a relayed stream at its deadline', () => {
  it('ends with an error event, closes the upstream and records the call, before the function would time out', async () => {
    const call = new CallRecorder('chat.completions', 'req_deadline', { now: () => Date.now() });
    call.endBy = Date.now() + 200;
    const upstream = stalledUpstream();
    const prepared = prepareChat(
      { model: 'famA-test', messages: [{ role: 'user', content: 'hi' }], stream: true },
      chatModel(),
      wordCounter,
    );
    const started = Date.now();
    let text = '';
    for await (const piece of chatEventStream(upstream, prepared, call)) text += String(piece);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(upstream.closed).toBe(true);
    expect(text).toContain('"code":"stream_interrupted"');
    expect(text).toContain('longest time a call may take');
    expect(text).not.toContain('[DONE]');
    expect(call.settlement()).toMatchObject({ outcome: 'stream_interrupted', cost: 0 });
  });
});
