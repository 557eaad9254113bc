import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM_LAUNCH } from '#test/browser.ts';
import { drainSettlements, startTestStack, type TestStack, takeSettlements } from '#test/stack.ts';

/**
 * Browser clients: an in-browser app on another origin calls the API with its user's key (OpenAI's SDK allows it
 * with `dangerouslyAllowBrowser`). The browser first sends a CORS preflight; without the right answers it hides
 * every response, errors included, from the page.
 */

let t: TestStack;
let browser: Browser;
/** Serves an empty page: the other origin the app runs on. */
let appServer: Server;
let appOrigin: string;

beforeAll(async () => {
  t = await startTestStack();
  appServer = createServer((_req, res) =>
    res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>app</title>'),
  );
  await new Promise<void>((resolve) => appServer.listen(0, '127.0.0.1', resolve));
  appOrigin = `http://127.0.0.1:${(appServer.address() as AddressInfo).port}`;
  browser = await chromium.launch(CHROMIUM_LAUNCH);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => appServer?.close(resolve));
  await t?.stop();
});

const preflight = (path: string, method: string, requestHeaders = 'authorization, content-type') =>
  fetch(`${t.baseURL}${path}`, {
    method: 'OPTIONS',
    headers: {
      origin: 'https://app.example',
      'access-control-request-method': method,
      'access-control-request-headers': requestHeaders,
    },
  });

describe('CORS', () => {
  it.each([
    ['/chat/completions', 'POST'],
    ['/embeddings', 'POST'],
    ['/audio/transcriptions', 'POST'],
    ['/audio/speech', 'POST'],
    ['/models', 'GET'],
    ['/models/famA-v4.1-flash', 'GET'],
  ])('answers the preflight of %s (%s) with 204 and the allowed method and headers', async (path, method) => {
    const res = await preflight(path, method, 'authorization, content-type, x-stainless-os');
    expect(res.status).toBe(204);
    expect(await res.text()).toBe('');
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
    expect(res.headers.get('access-control-allow-methods')?.split(', ')).toContain(method);
    expect(res.headers.get('access-control-allow-headers')).toBe(
      'authorization, content-type, x-stainless-os',
    );
    expect(Number(res.headers.get('access-control-max-age'))).toBeGreaterThan(0);
    expect(res.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
  });

  it('does not echo requested headers that are not a list of header names', async () => {
    const res = await preflight('/chat/completions', 'POST', 'authorization, x-a:b, <script>');
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-headers')).toBe('authorization, content-type');
  });

  it('charges nothing for a preflight and calls no upstream: only the real call is settled', async () => {
    await drainSettlements(t.stack);
    t.simulator.clearCalls();
    for (let i = 0; i < 3; i++) expect((await preflight('/chat/completions', 'POST')).status).toBe(204);
    expect(t.simulator.calls()).toHaveLength(0);
    const res = await t.post('/chat/completions', {
      model: 'famA-v4.1-flash',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(200);
    const records = await takeSettlements(t.stack, 2, 1_500);
    expect(records.map((r) => r.requestId)).toEqual([res.headers.get('x-request-id')]);
  });

  it('puts the allow-origin and exposed headers on successes and on errors alike', async () => {
    const ok = await t.post('/chat/completions', {
      model: 'famA-v4.1-flash',
      messages: [{ role: 'user', content: 'hi' }],
    });
    const unauthorized = await fetch(`${t.baseURL}/models`, { headers: { authorization: 'Bearer nope' } });
    const unknown = await fetch(`${t.baseURL}/no/such/path`);
    for (const res of [ok, unauthorized, unknown]) {
      expect(res.headers.get('access-control-allow-origin'), res.url).toBe('*');
      const exposed = res.headers.get('access-control-expose-headers')?.split(', ');
      expect(exposed, res.url).toEqual(
        expect.arrayContaining(['x-request-id', 'x-ratelimit-remaining-requests', 'retry-after']),
      );
    }
    expect([ok.status, unauthorized.status, unknown.status]).toEqual([200, 401, 404]);
  });

  it('still refuses a method the path does not serve, with 404 unknown_url', async () => {
    const res = await fetch(`${t.baseURL}/chat/completions`, {
      method: 'GET',
      headers: { authorization: `Bearer ${t.apiKey}` },
    });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unknown_url');
  });

  it('lets a page on another origin call the API with a key, read the answer, a streamed answer, the limit headers and an error', async () => {
    const page = await (await browser.newContext()).newPage();
    await page.goto(appOrigin);
    const seen = await page.evaluate(
      async ({ base, key }) => {
        const post = (body: unknown, apiKey = key) =>
          fetch(`${base}/chat/completions`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${apiKey}`,
              'content-type': 'application/json',
              'x-stainless-os': 'web',
            },
            body: JSON.stringify(body),
          });
        const messages = [{ role: 'user', content: 'Hello from a browser' }];
        const plain = await post({ model: 'famA-v4.1-flash', messages });
        const answer = (await plain.json()) as { choices: { message: { content: string } }[] };
        const streamed = await post({ model: 'famA-v4.1-flash', messages, stream: true });
        const events = await streamed.text();
        const refused = await post(
          { model: 'famA-v4.1-flash', messages },
          'svc_live_wrongWRONGwrong000000001',
        );
        return {
          status: plain.status,
          content: answer.choices[0]?.message.content ?? '',
          requestId: plain.headers.get('x-request-id'),
          remaining: plain.headers.get('x-ratelimit-remaining-requests'),
          streamStatus: streamed.status,
          streamDone: events.trimEnd().endsWith('data: [DONE]'),
          refusedStatus: refused.status,
          refusedCode: ((await refused.json()) as { error: { code: string } }).error.code,
        };
      },
      { base: t.baseURL, key: t.apiKey },
    );
    expect(seen).toMatchObject({
      status: 200,
      requestId: expect.stringMatching(/^req_/),
      remaining: expect.stringMatching(/^\d+$/),
      streamStatus: 200,
      streamDone: true,
      refusedStatus: 401,
      refusedCode: 'invalid_api_key',
    });
    expect(seen.content.length).toBeGreaterThan(0);
  });
});
