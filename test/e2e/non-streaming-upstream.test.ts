import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Deployment } from '#core/registry.ts';
import { sseEvents } from '#test/sse.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * An upstream that ignores `stream` and always answers with a whole chat.completion. A stream request to it used to
 * wait for events that never came, and fail as a drop — three in a row opened its circuit for the non-stream calls
 * it serves well. It is now a deployment that cannot serve the stream: the next one does, and health is untouched.
 */

let upstream: Server;
let calls = 0;
let t: TestStack;

const deploymentAt = (url: string, model: string): Deployment => ({
  id: `${model}@whole`,
  model,
  provider: 'whole',
  adapter: 'openai-compatible',
  baseUrl: url,
  upstreamModel: 'upstream-model',
  keyRefs: ['env:SIM_A_KEY_1'],
  priority: 0,
  weight: 1,
  status: 'active',
});

beforeAll(async () => {
  upstream = createServer((req, res) => {
    calls++;
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'chatcmpl-whole',
          object: 'chat.completion',
          created: 1,
          model: 'upstream-model',
          choices: [{ index: 0, message: { role: 'assistant', content: 'Whole.' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  // Circuit breaking on, as deployed: the point is that this upstream's answers never count against it.
  t = await startTestStack();
  const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
  await t.stack.container.registryStore.put([], [deploymentAt(url, 'famA-v4.1-flash')]);
  await t.stack.container.registry.refresh();
});
afterAll(async () => {
  await t?.stop();
  upstream?.close();
});

describe('a deployment whose upstream answers a stream request with a whole reply', () => {
  it('serves streams from the next deployment, and goes on serving non-stream calls itself', async () => {
    for (let i = 0; i < 4; i++) {
      const res = await t.post('/chat/completions', {
        model: 'famA-v4.1-flash',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-svc-provider')).not.toBe('whole');
      expect(sseEvents(await res.text()).at(-1)).toBe('[DONE]');
    }
    expect(calls).toBe(4);
    const whole = await t.post('/chat/completions', {
      model: 'famA-v4.1-flash',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(whole.status).toBe(200);
    expect(whole.headers.get('x-svc-provider')).toBe('whole');
  });
});
