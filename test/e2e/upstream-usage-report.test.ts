import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { o200kTokenCounter } from '#adapters/tokenizer.ts';
import type { Deployment } from '#core/registry.ts';
import { sseEvents } from '#test/sse.ts';
import { startTestStack, type TestStack, takeSettlementsOf } from '#test/stack.ts';

/**
 * An upstream whose stream ends with a usage report we cannot bill on — no `completion_tokens` — and, beside each
 * delta, the whole message so far (as Perplexity's chunks carry it). The report was billed as a reply of 0 tokens;
 * read as malformed it is not passed on, and the stream is billed on our count of its deltas alone.
 */

const REPLY = ['Hello', ' there', ' my', ' friend'];

const chunk = (delta: Record<string, unknown>, message: string, finish: string | null = null) =>
  JSON.stringify({
    id: 'chatcmpl-x',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'upstream-model',
    choices: [{ index: 0, delta, message: { role: 'assistant', content: message }, finish_reason: finish }],
  });

let upstream: Server;
let t: TestStack;

beforeAll(async () => {
  upstream = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const events = [chunk({ role: 'assistant', content: '' }, '')];
      for (const [i, word] of REPLY.entries())
        events.push(chunk({ content: word }, REPLY.slice(0, i + 1).join('')));
      events.push(chunk({}, REPLY.join(''), 'stop'));
      events.push(
        JSON.stringify({ id: 'chatcmpl-x', choices: [], usage: { prompt_tokens: 9, total_tokens: 9 } }),
      );
      res.end(`${events.map((e) => `data: ${e}\n\n`).join('')}data: [DONE]\n\n`);
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  t = await startTestStack();
  const deployment: Deployment = {
    id: 'famA-v4.1-flash@odd',
    model: 'famA-v4.1-flash',
    provider: 'odd',
    adapter: 'openai-compatible',
    baseUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`,
    upstreamModel: 'upstream-model',
    keyRefs: ['env:SIM_A_KEY_1'],
    priority: 0,
    weight: 1,
    status: 'active',
  };
  await t.stack.container.registryStore.put([], [deployment]);
  await t.stack.container.registry.refresh();
});
afterAll(async () => {
  await t?.stop();
  upstream?.close();
});

const streamed = async (includeUsage: boolean) => {
  const res = await t.post('/chat/completions', {
    model: 'famA-v4.1-flash',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
  });
  expect(res.status).toBe(200);
  expect(res.headers.get('x-svc-provider')).toBe('odd');
  const events = sseEvents(await res.text());
  expect(events.at(-1)).toBe('[DONE]');
  return {
    id: res.headers.get('x-request-id'),
    chunks: events.slice(0, -1).map((e) => JSON.parse(e) as { choices: unknown[]; usage?: unknown }),
  };
};

describe('a stream whose usage report has no completion count', () => {
  it('is billed on the deltas it relayed (not the message beside them), and the report is not passed on', async () => {
    const plain = await streamed(false);
    // No usage-only chunk reaches a client that did not ask for one.
    expect(plain.chunks.every((c) => c.choices.length > 0 && c.usage === undefined)).toBe(true);
    const asked = await streamed(true);
    const usageChunks = asked.chunks.filter((c) => c.choices.length === 0);
    expect(usageChunks).toHaveLength(1);
    const words = o200kTokenCounter.count(REPLY.join(''));
    expect(usageChunks[0]?.usage).toMatchObject({ completion_tokens: words });
    const records = await takeSettlementsOf(t.stack, [plain.id, asked.id]);
    for (const record of records) {
      expect(record?.usage).toMatchObject({ completionTokens: words, source: 'estimated' });
      expect(record?.cost).toBeGreaterThan(0);
    }
  });
});
