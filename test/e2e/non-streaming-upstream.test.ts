import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Deployment } from '#core/registry.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { sseEvents } from '#test/sse.ts';
import { startTestStack, type TestStack, takeSettlementsOf } from '#test/stack.ts';

/**
 * An upstream that ignores `stream` and always answers with a whole chat.completion. A stream request to it is served
 * that reply as the stream the client asked for — the generation is done and paid for, and throwing it away for
 * another deployment's would pay twice — billed on the reply's usage; the instance then asks that deployment for whole
 * replies for a while. A JSON answer that is no completion falls back, and an upstream that labels a real event stream
 * `application/json` (some do) still streams.
 */

let upstream: Server;
/** What each upstream model was asked: `stream`, and whether usage was asked for with it. */
const asked: Record<string, { stream: boolean; options: unknown }[]> = {};
let t: TestStack;

const completion = {
  id: 'chatcmpl-whole',
  object: 'chat.completion',
  created: 1,
  model: 'whole-model',
  choices: [{ index: 0, message: { role: 'assistant', content: 'Whole.' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
};

/** A reply larger than any one streamed event may be (8 MiB), as logprobs or many choices can make one. */
const BIG_TEXT = 'word '.repeat(2_000_000);

const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  JSON.stringify({
    id: 'chatcmpl-labelled',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'labelled-model',
    choices: [{ index: 0, delta, finish_reason: finish }],
  });

const deploymentAt = (url: string, model: string, upstreamModel: string): Deployment => ({
  id: `${model}@${upstreamModel}`,
  model,
  provider: upstreamModel.replace('-model', ''),
  adapter: 'openai-compatible',
  baseUrl: url,
  upstreamModel,
  keyRefs: ['env:SIM_A_KEY_1'],
  priority: 0,
  weight: 1,
  status: 'active',
});

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString('utf8');
    });
    req.on('end', () => {
      const parsed = JSON.parse(body) as { model: string; stream?: boolean; stream_options?: unknown };
      const { model, stream } = parsed;
      asked[model] = [...(asked[model] ?? []), { stream: stream === true, options: parsed.stream_options }];
      res.writeHead(200, { 'content-type': 'application/json' });
      if (model === 'junk-model') return res.end('{"status":"queued"}');
      if (model === 'big-model') {
        const message = { role: 'assistant', content: BIG_TEXT };
        return res.end(
          JSON.stringify({ ...completion, model, choices: [{ index: 0, message, finish_reason: 'stop' }] }),
        );
      }
      if (model === 'labelled-model' && stream) {
        const events = [
          chunk({ role: 'assistant', content: '' }),
          chunk({ content: 'Streamed.' }),
          chunk({}, 'stop'),
        ];
        res.end(`${events.map((e) => `data: ${e}\n\n`).join('')}data: [DONE]\n\n`);
      } else res.end(JSON.stringify({ ...completion, model }));
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  // Circuit breaking on, as deployed: the point is that the whole replies never count against the deployment.
  t = await startTestStack();
  const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
  const registry = t.stack.container.registryStore;
  // famA-v4.1-flash is served by the whole-reply upstream alone; famA-v4.1-flash-1017 by it first, then the simulator.
  const alone = (await registry.load()).deployments.filter((d) => d.model === 'famA-v4.1-flash');
  await registry.put(
    [],
    [
      ...alone.map((d) => ({ ...d, status: 'retired' as const })),
      deploymentAt(url, 'famA-v4.1-flash', 'whole-model'),
      deploymentAt(url, 'famA-v4.1-flash-1017', 'whole-mixed-model'),
      deploymentAt(url, 'famB-5.3', 'labelled-model'),
      deploymentAt(url, 'famC-k3', 'junk-model'),
      deploymentAt(url, 'famD-5-preview', 'big-model'),
    ],
  );
  await t.stack.container.registry.refresh();
});
afterAll(async () => {
  await t?.stop();
  upstream?.close();
});

const post = (model: string, stream: boolean, extra: Record<string, unknown> = {}) =>
  t.post('/chat/completions', {
    model,
    messages: [{ role: 'user', content: 'hi' }],
    ...(stream ? { stream } : {}),
    ...extra,
  });

/** A stream response's chunks (each checked against OpenAI's schema), after checking it ended with [DONE]. */
interface Chunk extends Record<string, unknown> {
  choices: { delta: unknown; finish_reason: string | null }[];
}
const chunksOf = async (res: Response): Promise<Chunk[]> => {
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const events = sseEvents(await res.text());
  expect(events.at(-1)).toBe('[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
  for (const chunk of chunks) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
  return chunks;
};

describe('a deployment whose upstream answers a stream request with a whole reply', () => {
  it('serves the reply as a stream billed on its usage, and asks a lone deployment for whole replies from then on', async () => {
    const first = await post('famA-v4.1-flash', true);
    expect(first.headers.get('x-svc-provider')).toBe('whole');
    expect(first.headers.get('x-svc-attempts')).toBe('1');
    const chunks = await chunksOf(first);
    expect(chunks.map((c) => c.choices[0]?.delta)).toEqual([
      { role: 'assistant', content: '' },
      { content: 'Whole.' },
      {},
    ]);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop');
    expect(chunks.every((c) => c.model === 'famA-v4.1-flash' && c.id === 'chatcmpl-whole')).toBe(true);
    // The client did not ask for usage: none shown, though the call is billed on it.
    expect(chunks.some((c) => 'usage' in c)).toBe(false);

    const second = await post('famA-v4.1-flash', true, { stream_options: { include_usage: true } });
    expect(second.headers.get('x-svc-provider')).toBe('whole');
    const withUsage = await chunksOf(second);
    expect(withUsage.at(-1)).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
    });
    expect(withUsage.map((c) => c.choices[0]?.delta).slice(0, 3)).toEqual([
      { role: 'assistant', content: '' },
      { content: 'Whole.' },
      {},
    ]);
    // Asked to stream once (with usage, as every stream is); then for the whole reply, without stream options.
    expect(asked['whole-model']).toEqual([
      { stream: true, options: { include_usage: true } },
      { stream: false, options: undefined },
    ]);
    const records = await takeSettlementsOf(t.stack, [
      first.headers.get('x-request-id'),
      second.headers.get('x-request-id'),
    ]);
    for (const record of records) {
      expect(record).toMatchObject({ outcome: 'success', stream: true, provider: 'whole' });
      expect(record?.usage).toMatchObject({ promptTokens: 5, completionTokens: 1, source: 'upstream' });
      expect(record?.cost).toBeGreaterThan(0);
    }

    const whole = await post('famA-v4.1-flash', false);
    expect(whole.status).toBe(200);
    expect(whole.headers.get('x-svc-provider')).toBe('whole');
    expect(await whole.json()).toMatchObject({ object: 'chat.completion', model: 'famA-v4.1-flash' });
  });

  it('routes the next streams to the deployments that stream, and keeps it for non-stream calls', async () => {
    const first = await post('famA-v4.1-flash-1017', true);
    expect(first.headers.get('x-svc-provider')).toBe('whole-mixed');
    expect((await chunksOf(first))[1]?.choices[0]?.delta).toEqual({ content: 'Whole.' });
    for (let i = 0; i < 3; i++) {
      const next = await post('famA-v4.1-flash-1017', true);
      expect(next.headers.get('x-svc-provider')).toMatch(/^sim-/);
      expect(next.headers.get('x-svc-attempts')).toBe('1');
      expect((await chunksOf(next)).length).toBeGreaterThan(3);
    }
    expect(asked['whole-mixed-model']).toHaveLength(1);
    const whole = await post('famA-v4.1-flash-1017', false);
    expect(whole.headers.get('x-svc-provider')).toBe('whole-mixed');
    expect(asked['whole-mixed-model']).toEqual([
      { stream: true, options: { include_usage: true } },
      { stream: false, options: undefined },
    ]);
  });

  it('falls back when the JSON answering a stream request is no chat completion, and asks it to stream again', async () => {
    for (let i = 0; i < 2; i++) {
      const res = await post('famC-k3', true);
      expect(res.headers.get('x-svc-provider')).not.toBe('junk');
      expect(res.headers.get('x-svc-attempts')).toBe('2');
      expect((await chunksOf(res)).length).toBeGreaterThan(2);
    }
    expect(asked['junk-model']?.map((a) => a.stream)).toEqual([true, true]);
  });

  it('serves a whole reply larger than a streamed event may be', async () => {
    const res = await post('famD-5-preview', true);
    expect(res.headers.get('x-svc-provider')).toBe('big');
    expect((await chunksOf(res))[1]?.choices[0]?.delta).toEqual({ content: BIG_TEXT });
  });

  it('streams from an upstream that labels its event stream application/json', async () => {
    const res = await post('famB-5.3', true);
    expect(res.headers.get('x-svc-provider')).toBe('labelled');
    expect(await res.text()).toContain('Streamed.');
  });
});
