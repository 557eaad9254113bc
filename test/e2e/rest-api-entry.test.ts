import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { APIGatewayProxyEvent } from 'aws-lambda';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { invocationContext, invokeStreaming, readBody } from '#local/function-url.ts';
import type { StreamingHandler } from '#local/lambda-runtime.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * On AWS, CloudFront's `/v1/*` reaches the functions through API Gateway's REST API, whose streaming
 * integrations send the payload-1.0 event (headers as the client cased them, `path`, `httpMethod`). This
 * serves the real handlers behind such events and drives them with the openai SDK.
 */
const restEvent = (req: IncomingMessage, body: Buffer): APIGatewayProxyEvent => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const headers: Record<string, string> = {};
  const multiValueHeaders: Record<string, string[]> = {};
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i] as string;
    const value = req.rawHeaders[i + 1] as string;
    headers[name] = value;
    multiValueHeaders[name] = [...(multiValueHeaders[name] ?? []), value];
  }
  return {
    resource: '/{proxy+}',
    path: url.pathname,
    httpMethod: req.method ?? 'GET',
    headers,
    multiValueHeaders,
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: null,
    stageVariables: null,
    body: body.length > 0 ? body.toString('utf8') : null,
    isBase64Encoded: false,
    requestContext: {
      accountId: '123456789012',
      apiId: 'rest',
      httpMethod: req.method ?? 'GET',
      identity: { sourceIp: '127.0.0.1', userAgent: headers['User-Agent'] ?? '' },
      path: `/prod${url.pathname}`,
      protocol: 'HTTP/1.1',
      requestId: crypto.randomUUID(),
      requestTimeEpoch: Date.now(),
      resourceId: 'r',
      resourcePath: '/{proxy+}',
      stage: 'prod',
    },
  } as unknown as APIGatewayProxyEvent;
};

let t: TestStack;
let server: Server;
let client: OpenAI;
beforeAll(async () => {
  t = await startTestStack();
  const container = () => t.stack.container;
  const handlers: Record<string, StreamingHandler> = {
    '/v1/models': (await import('#functions/models.ts')).createHandler(
      container,
    ) as unknown as StreamingHandler,
    '/v1/chat/completions': (await import('#functions/chat-completions.ts')).createHandler(
      container,
    ) as unknown as StreamingHandler,
  };
  server = createServer(async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const handler = handlers[path.startsWith('/v1/models') ? '/v1/models' : path];
    const body = (await readBody(req, 1 << 20)) ?? Buffer.alloc(0);
    if (!handler) return void res.writeHead(404).end();
    await invokeStreaming(handler, restEvent(req, body) as never, invocationContext('rest', 60_000), res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: t.apiKey, maxRetries: 0 });
});
afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
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
