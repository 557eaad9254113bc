import { brotliCompressSync, gzipSync } from 'node:zlib';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RestApi, startRestApi } from '#test/rest-api.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/** The real handlers behind payload-1.0 events, as the REST API's streaming integrations send them. */
let t: TestStack;
let api: RestApi;
let client: OpenAI;
beforeAll(async () => {
  t = await startTestStack();
  api = await startRestApi(() => t.stack.container);
  client = new OpenAI({ baseURL: api.baseURL, apiKey: t.apiKey, maxRetries: 0 });
});
afterAll(async () => {
  await api?.close();
  await t?.stop();
});

describe('the REST API entry (payload 1.0 events)', () => {
  it('authenticates and serves the model listing', async () => {
    const model = await client.models.retrieve('famA-v4.1-flash-1017');
    expect(model.id).toBe('famA-v4.1-flash-1017');
    const bad = new OpenAI({
      baseURL: client.baseURL,
      apiKey: 'svc_live_wrongwrongwrongwrong',
      maxRetries: 0,
    });
    await expect(bad.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
  });

  it('streams a chat completion', async () => {
    const stream = await client.chat.completions.create({
      model: 'famA-v4.1-flash',
      messages: [{ role: 'user', content: 'hello' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text.length).toBeGreaterThan(0);
  });

  it('serves a compressed body: API Gateway hands it over base64, its bytes whole', async () => {
    const body = JSON.stringify({
      model: 'famA-v4.1-flash',
      messages: [{ role: 'user', content: 'Zipped hello' }],
    });
    for (const [encoding, bytes] of [
      ['gzip', gzipSync(body)],
      ['br', brotliCompressSync(body)],
    ] as const) {
      const response = await fetch(`${api.baseURL}/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${t.apiKey}`,
          'content-type': 'application/json',
          'content-encoding': encoding,
        },
        body: bytes,
      });
      expect([encoding, response.status]).toEqual([encoding, 200]);
    }
  });
});

/**
 * This server hands every method to the functions, as a Function URL does (it has no routes): the functions
 * themselves answer CORS preflights and refuse the methods their paths do not serve.
 */
describe('methods a function does not serve (Function URLs route none)', () => {
  const base = () => client.baseURL;

  it('answers a CORS preflight itself', async () => {
    for (const [path, method] of [
      ['/chat/completions', 'POST'],
      ['/models', 'GET'],
    ]) {
      const res = await fetch(`${base()}${path}`, {
        method: 'OPTIONS',
        headers: { origin: 'https://app.example', 'access-control-request-method': method as string },
      });
      expect(res.status, path).toBe(204);
      expect(res.headers.get('access-control-allow-origin'), path).toBe('*');
      expect(res.headers.get('access-control-allow-methods'), path).toBe(`${method}, OPTIONS`);
    }
  });

  it('refuses any other method with 404 unknown_url, before reading the body or the key', async () => {
    for (const [path, method] of [
      ['/chat/completions', 'GET'],
      ['/chat/completions', 'PUT'],
      ['/models', 'POST'],
      ['/models/famA-v4.1-flash-1017', 'DELETE'],
    ]) {
      const res = await fetch(`${base()}${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(404);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('unknown_url');
      expect(body.error.message).toContain(`${method} /v1${path}`);
      expect(res.headers.get('access-control-allow-origin')).toBe('*');
    }
  });
});
