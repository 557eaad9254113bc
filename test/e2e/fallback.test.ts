import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sseEvents } from '#test/sse.ts';
import { NO_CIRCUIT_BREAKING, startTestStack, type TestStack } from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ functionEnv: NO_CIRCUIT_BREAKING });
});
afterAll(() => t?.stop());
afterEach(() => {
  t.simulator.resetFaults();
  t.simulator.clearCalls();
});

const body = (extra: Record<string, unknown> = {}) => ({
  model: 'famA-v4.1-flash',
  messages: [{ role: 'user', content: 'hello' }],
  ...extra,
});

describe('fallback before the first byte reaches the client', () => {
  it.each(['server_error', 'overloaded', 'drop_before'] as const)(
    'serves a non-stream call from the next provider when the first fails with %s',
    async (error) => {
      t.simulator.setFaults('sim-a', { error });
      const res = await t.post('/chat/completions', body());
      expect(res.status).toBe(200);
      expect(res.headers.get('x-svc-provider')).toBe('sim-b');
      const completion = (await res.json()) as { choices: { message: { content: string } }[] };
      expect(completion.choices[0]?.message.content.length).toBeGreaterThan(0);
      // Non-stream: an upstream-reported fault cycles sim-a's two keys before moving on; a drop does not.
      expect(t.simulator.calls('sim-a')).toHaveLength(error === 'drop_before' ? 1 : 2);
      expect(res.headers.get('x-svc-attempts')).toBe(error === 'drop_before' ? '2' : '3');
    },
  );

  it.each(['server_error', 'overloaded', 'drop_before'] as const)(
    'serves a stream from the next provider when the first fails with %s',
    async (error) => {
      t.simulator.setFaults('sim-a', { error });
      const res = await t.post('/chat/completions', body({ stream: true }));
      expect(res.status).toBe(200);
      expect(res.headers.get('x-svc-provider')).toBe('sim-b');
      const events = sseEvents(await res.text());
      expect(events.at(-1)).toBe('[DONE]');
      // Streams do not cycle keys (spec §7 names non-stream calls): one try per provider.
      expect(t.simulator.calls('sim-a')).toHaveLength(1);
    },
  );

  it('falls back when a stream drops after its headers but before its first event', async () => {
    t.simulator.setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 0 });
    const res = await t.post('/chat/completions', body({ stream: true }));
    expect(res.headers.get('x-svc-provider')).toBe('sim-b');
    expect(sseEvents(await res.text()).at(-1)).toBe('[DONE]');
  });

  it('falls back when a non-stream body is cut off', async () => {
    t.simulator.setFaults('sim-a', { error: 'drop_mid' });
    const res = await t.post('/chat/completions', body());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-svc-provider')).toBe('sim-b');
  });

  it('falls back when the first byte is too slow, without waiting for it', async () => {
    // The test stack allows 1.5 s for a stream's first event.
    t.simulator.setFaults('sim-a', { firstByteDelayMs: 10_000 });
    const started = Date.now();
    const res = await t.post('/chat/completions', body({ stream: true }));
    expect(res.headers.get('x-svc-provider')).toBe('sim-b');
    expect(sseEvents(await res.text()).at(-1)).toBe('[DONE]');
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('cycles to the deployment’s other key when one key is refused', async () => {
    t.simulator.setFaults('sim-a', { error: 'unauthorized', keys: ['sim-a-key-1'] });
    for (let i = 0; i < 6; i++) {
      const res = await t.post('/chat/completions', body());
      expect(res.status).toBe(200);
      expect(res.headers.get('x-svc-provider')).toBe('sim-a');
    }
    const keys = t.simulator.calls('sim-a').map((c) => c.key);
    // Key 1 was refused at least once (the first call starts on it, or a later one does: the start is random)…
    expect(keys).toContain('sim-a-key-1');
    // …and every failure on key 1 is followed at once by a success on key 2.
    keys.forEach((key, i) => {
      if (key === 'sim-a-key-1') expect(keys[i + 1]).toBe('sim-a-key-2');
    });
    expect(keys.filter((k) => k === 'sim-a-key-2')).toHaveLength(6);
  });
});

describe('a stream that breaks after the first byte', () => {
  it('ends with an explicit error event and no [DONE]', async () => {
    t.simulator.setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 3 });
    const res = await t.post('/chat/completions', body({ stream: true }));
    expect(res.status).toBe(200);
    const events = sseEvents(await res.text());
    expect(events).toHaveLength(4);
    expect(events).not.toContain('[DONE]');
    const last = JSON.parse(events.at(-1) as string) as { error: Record<string, unknown> };
    expect(last.error).toMatchObject({ type: 'server_error', code: 'stream_interrupted' });
    expect(typeof last.error.message).toBe('string');
    // It was not retried elsewhere: bytes had already reached the client.
    expect(t.simulator.calls('sim-b')).toHaveLength(0);
  });

  it('surfaces as an error in the openai SDK, never as a silently short reply', async () => {
    t.simulator.setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 3 });
    const stream = await t.openai().chat.completions.create({ ...body(), stream: true } as never);
    const received: unknown[] = [];
    const error = await (async () => {
      for await (const chunk of stream as unknown as AsyncIterable<unknown>) received.push(chunk);
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(received.length).toBe(3);
  });
});
