import { describe, expect, it } from 'vitest';
import { CallRecorder } from '#core/call-recorder.ts';
import { prepareChat } from '#core/chat.ts';
import type { ChatStreamEvent } from '#core/upstream.ts';
import { audioBody } from '#http/audio-stream.ts';
import { chatEventStream } from '#http/chat-stream.ts';
import { chatModel, wordCounter } from '#test/fixtures.ts';
import { stallingUpstream } from '#test/stalling.ts';

/**
 * Lambda kills an invocation at its timeout, the work after the response included: a stream still running then
 * would be neither charged nor recorded. The relay ends it first, at the call's deadline, so the invocation can
 * settle — charged for what was sent, as an abandoned stream is: the length that ran out is the caller's (the
 * output it asked for, or a slow read holding the relay), and the upstream bills every token it streamed. Here an
 * upstream sends a few events and then nothing, as a model that stalls would.
 */

const chunk = (delta: string): ChatStreamEvent => ({
  data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":${delta},"finish_reason":null}]}`,
  usage: null,
  usageOnly: false,
  output: [],
});

/** An upstream that sends the opening and three words, then stalls until it is closed. */
const stalledUpstream = () =>
  stallingUpstream<ChatStreamEvent>(
    [
      chunk('{"role":"assistant","content":""}'),
      ...['Once', ' upon', ' a'].map((word) => ({ ...chunk(`{"content":"${word}"}`), output: [word] })),
    ],
    4,
  );

describe('a relayed stream at its deadline', () => {
  it('ends with an error event, closes the upstream and records the call, before the function would time out', async () => {
    const call = new CallRecorder('chat.completions', 'req_deadline', { now: () => Date.now() });
    call.model = chatModel();
    call.endBy = Date.now() + 200;
    const upstream = stalledUpstream();
    const prepared = prepareChat(
      { model: 'famA-test', messages: [{ role: 'user', content: 'hi' }], stream: true },
      chatModel(),
      wordCounter,
    );
    const started = Date.now();
    let text = '';
    for await (const piece of chatEventStream(upstream, prepared, call, wordCounter)) text += String(piece);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(upstream.closed).toBe(true);
    expect(text).toContain('"code":"stream_interrupted"');
    expect(text).toContain('longest time a call may take');
    expect(text).not.toContain('[DONE]');
    expect(text).toContain('"content":" upon"');
    // Charged for the prompt and the three words sent (1 and 2 USD per 1M tokens: 1,000 and 2,000 nano each).
    const settled = call.settlement();
    expect(settled).toMatchObject({
      outcome: 'client_aborted',
      usage: { promptTokens: prepared.promptTokens, completionTokens: 3, source: 'estimated' },
      fault: { kind: 'client', detail: expect.stringContaining('deadline') },
    });
    expect(prepared.promptTokens).toBeGreaterThan(0);
    expect(settled.cost).toBe(prepared.promptTokens * 1_000 + 3 * 2_000);
  });

  it('records the cut and ends the body when its reader has stopped reading, so the invocation still settles', async () => {
    const call = new CallRecorder('chat.completions', 'req_stuck', { now: () => Date.now() });
    call.model = chatModel();
    call.endBy = Date.now() + 100;
    const prepared = prepareChat(
      { model: 'famA-test', messages: [{ role: 'user', content: 'hi' }], stream: true },
      chatModel(),
      wordCounter,
    );
    // Far more than the body buffers: the relay waits at a yield for a reader that never reads again.
    const words = Array.from({ length: 5_000 }, (_, i) => ({
      ...chunk(`{"content":" w${i}"}`),
      output: [` w${i}`],
    }));
    const body = chatEventStream(stallingUpstream(words), prepared, call, wordCounter);
    const first = await new Promise<unknown>((resolve) => body.once('data', resolve));
    body.pause();
    expect(String(first)).toContain('w0');
    const closed = new Promise<void>((resolve) => body.once('close', () => resolve()));
    await closed;
    expect(body.destroyed).toBe(true);
    const settled = call.settlement();
    expect(settled).toMatchObject({
      outcome: 'client_aborted',
      fault: { detail: expect.stringContaining('deadline') },
    });
    // What the relay had produced by then, held to nothing more: some words, fewer than all of them.
    expect(settled.usage?.completionTokens).toBeGreaterThan(0);
    expect(settled.usage?.completionTokens).toBeLessThan(words.length);
  }, 10_000);

  it('cuts speech audio at the deadline and charges its characters, as for a client that leaves mid-audio', async () => {
    const call = new CallRecorder('audio.speech', 'req_speech_deadline', { now: () => Date.now() });
    call.model = chatModel({ id: 'svc-tts', kind: 'speech', rates: { input: 25, output: 0 } });
    call.endBy = Date.now() + 200;
    const upstream = stallingUpstream([new Uint8Array(1024)], 1);
    const usage = {
      promptTokens: 0,
      completionTokens: 0,
      cachedPromptTokens: 0,
      reasoningTokens: 0,
      characters: 40,
      source: 'measured',
    } as const;
    const received = await (async () => {
      let bytes = 0;
      try {
        for await (const piece of audioBody(upstream, call, usage)) bytes += (piece as Buffer).length;
      } catch (error) {
        return { bytes, error };
      }
      return { bytes, error: null };
    })();
    expect(received.bytes).toBe(1024);
    // Binary audio has no error event: the response fails rather than end cleanly short.
    expect(received.error).toBeInstanceOf(Error);
    expect(upstream.closed).toBe(true);
    const settled = call.settlement();
    expect(settled).toMatchObject({ outcome: 'client_aborted', usage: { characters: 40 } });
    expect(settled.cost).toBeGreaterThan(0);
  });
});
