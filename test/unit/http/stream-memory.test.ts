import { describe, expect, it } from 'vitest';
import { CallRecorder } from '#core/call-recorder.ts';
import { prepareChat } from '#core/chat.ts';
import type { ChatStream, ChatStreamEvent } from '#core/upstream.ts';
import { chatEventStream } from '#http/chat-stream.ts';
import { chatEvent } from '#test/chat-chunks.ts';
import { chatModel, wordCounter } from '#test/fixtures.ts';
import { heapAfterCollection } from '#test/heap.ts';

/**
 * What a long, busy stream keeps in memory while it is relayed: its chunks, once relayed, must go. (Raced against a
 * keep-alive promise that lived as long as the upstream never paused, every chunk stayed until the stream ended.)
 */

const EVENTS = 20_000;

/** An upstream that never pauses, each chunk ~2 KB beside its one character of output; the heap at two points. */
const busyUpstream = (heapAt: Map<number, number>): ChatStream => ({
  close: () => {},
  async *[Symbol.asyncIterator](): AsyncGenerator<ChatStreamEvent> {
    for (let i = 0; i < EVENTS; i++) {
      if (i === 2_000 || i === EVENTS - 1) heapAt.set(i, heapAfterCollection());
      yield chatEvent(
        JSON.stringify({
          id: 'c',
          object: 'chat.completion.chunk',
          created: 1,
          model: 'm',
          choices: [{ index: 0, delta: i === 0 ? { role: 'assistant', content: '' } : { content: 'a' } }],
          // Fields some upstreams add (logprobs, provider metadata): made anew for each chunk.
          x_meta: `${i}:${'m'.repeat(2_000)}`,
        }),
      );
    }
  },
});

describe('a long stream that never goes quiet', () => {
  it('lets go of the chunks it has relayed', async () => {
    const heapAt = new Map<number, number>();
    const prepared = prepareChat(
      { model: 'famA-test', messages: [{ role: 'user', content: 'go' }], stream: true },
      chatModel(),
      wordCounter,
    );
    const call = new CallRecorder('chat.completions', 'req_memory', { now: () => Date.now() });
    const body = chatEventStream(busyUpstream(heapAt), prepared, call, wordCounter, undefined, 15_000);
    let bytes = 0;
    let last = '';
    for await (const piece of body) {
      bytes += String(piece).length;
      last = String(piece);
    }
    // Every chunk reached the reader, and the stream ended whole.
    expect(bytes).toBeGreaterThan(EVENTS * 2_000);
    expect(last.endsWith('data: [DONE]\n\n')).toBe(true);
    // 18,000 chunks of ~2 KB relayed between the two points: 36 MB if they were kept.
    expect((heapAt.get(EVENTS - 1) ?? 0) - (heapAt.get(2_000) ?? 0)).toBeLessThan(8 * 1024 * 1024);
  });
});
