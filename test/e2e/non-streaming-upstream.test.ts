import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Deployment } from '#core/registry.ts';
import { sseEvents } from '#test/sse.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * An upstream that ignores `stream` and always answers with a whole chat.completion. A stream request to it used to
 * wait for events that never came, and fail as a drop — three in a row opened its circuit for the non-stream calls
 * it serves well. It is now a deployment that cannot serve the stream: the next one does, health is untouched, and
 * the instance does not ask it to stream again for a while (each ask costs a whole reply, thrown away). An upstream
 * that labels a real event stream `application/json` (some do) still streams.
 */

let upstream: Server;
const calls: Record<string, number> = {};
let t: TestStack;

const completion = {
  id: 'chatcmpl-whole',
  object: 'chat.completion',
  created: 1,
  model: 'whole-model',
  choices: [{ index: 0, message: { role: 'assistant', content: 'Whole.' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
};

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
      const { model, stream } = JSON.parse(body) as { model: string; stream?: boolean };
      calls[model] = (calls[model] ?? 0) + 1;
      res.writeHead(200, { 'content-type': 'application/json' });
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
  await t.stack.container.registryStore.put(
    [],
    [deploymentAt(url, 'famA-v4.1-flash', 'whole-model'), deploymentAt(url, 'famB-5.3', 'labelled-model')],
  );
  await t.stack.container.registry.refresh();
});
afterAll(async () => {
  await t?.stop();
  upstream?.close();
});

const post = (model: string, stream: boolean) =>
  t.post('/chat/completions', {
    model,
    messages: [{ role: 'user', content: 'hi' }],
    ...(stream ? { stream } : {}),
  });

describe('a deployment whose upstream answers a stream request with a whole reply', () => {
  it('serves streams from the next deployment, asks it to stream once only, and goes on serving non-stream calls', async () => {
    for (let i = 0; i < 4; i++) {
      const res = await post('famA-v4.1-flash', true);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-svc-provider')).not.toBe('whole');
      expect(sseEvents(await res.text()).at(-1)).toBe('[DONE]');
    }
    expect(calls['whole-model']).toBe(1);
    const whole = await post('famA-v4.1-flash', false);
    expect(whole.status).toBe(200);
    expect(whole.headers.get('x-svc-provider')).toBe('whole');
  });

  it('streams from an upstream that labels its event stream application/json', async () => {
    const res = await post('famB-5.3', true);
    expect(res.headers.get('x-svc-provider')).toBe('labelled');
    expect(await res.text()).toContain('Streamed.');
  });
});
