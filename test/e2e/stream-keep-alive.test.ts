import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * A stream that goes quiet (a model thinking) sends SSE comments, so CloudFront — which cuts a response silent for
 * its read timeout, between packets too — does not cut it. Here the keep-alive is 40 ms and the simulator pauses
 * 150 ms between chunks; the official SDK must read the same completion as without the pauses.
 */
let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ functionEnv: { STREAM_KEEP_ALIVE_MS: '40' } });
}, 120_000);
afterAll(() => t?.stop());

const PAUSED = 'Say something short. [[sim: chunk_delay_ms=150]]';

describe('a quiet stream', () => {
  it('carries keep-alive comments between its events, and the usage chunk is the last event', async () => {
    const res = await t.post('/chat/completions', {
      model: 'famA-v4.1-flash',
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 4,
      messages: [{ role: 'user', content: PAUSED }],
    });
    expect(res.status).toBe(200);
    const events = (await res.text()).split('\n\n').filter((e) => e !== '');
    expect(events.filter((e) => e === ': keep-alive').length).toBeGreaterThan(0);
    // Every other event is a data event, ending with the usage chunk and [DONE].
    const data = events.filter((e) => e !== ': keep-alive');
    expect(data.every((e) => e.startsWith('data: '))).toBe(true);
    expect(data.at(-1)).toBe('data: [DONE]');
    expect(JSON.parse((data.at(-2) as string).slice(6))).toMatchObject({
      choices: [],
      usage: { completion_tokens: 4 },
    });
  });

  it('is read by the official openai SDK as the completion its data events carry', async () => {
    const body = {
      model: 'famA-v4.1-flash',
      stream: true as const,
      max_tokens: 4,
      messages: [{ role: 'user' as const, content: PAUSED }],
    };
    const stream = await t.openai().chat.completions.create(body);
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const read = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    // The simulator's text follows the prompt: the same request, read raw, comments and all.
    const raw = await (await t.post('/chat/completions', body)).text();
    expect(raw).toContain(': keep-alive');
    const sent = raw
      .split('\n\n')
      .filter((e) => e.startsWith('data: {'))
      .map(
        (e) =>
          (JSON.parse(e.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta
            .content ?? '',
      )
      .join('');
    expect(read.split(' ')).toHaveLength(4);
    expect(read).toBe(sent);
  });
});
