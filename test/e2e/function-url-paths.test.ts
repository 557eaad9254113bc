import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Container } from '#functions/container.ts';
import { functionUrlEvent, invocationContext, invokeStreaming, readBody } from '#local/function-url.ts';
import type { StreamingHandler } from '#local/lambda-runtime.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * On AWS a Function URL hands its one function every method and every path below the URL — unlike the local host
 * and the REST API, which route by path. Each function must then refuse a path it does not serve as they do (404
 * unknown_url, before the key or the body is read), answer an OpenAI-shaped 500 when it cannot start at all, and
 * see a repeated header joined, as payload 2.0 delivers it.
 */

let t: TestStack;
/** One server per function, each handed every request as its Function URL would be. */
const urls: Record<string, string> = {};
const servers: Server[] = [];

const serveAll = async (handler: StreamingHandler): Promise<string> => {
  const server = createServer(async (req, res) => {
    const body = (await readBody(req, 1 << 20)) ?? Buffer.alloc(0);
    await invokeStreaming(handler, functionUrlEvent(req, body), invocationContext('fn', 60_000), res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

beforeAll(async () => {
  t = await startTestStack();
  const container = () => t.stack.container;
  const asStreaming = (h: unknown) => h as StreamingHandler;
  urls.chat = await serveAll(
    asStreaming((await import('#functions/chat-completions.ts')).createHandler(container)),
  );
  urls.models = await serveAll(asStreaming((await import('#functions/models.ts')).createHandler(container)));
  const broken = (): Container => {
    throw new Error('EMBEDDINGS_TABLE is not set');
  };
  urls.brokenModels = await serveAll(
    asStreaming((await import('#functions/models.ts')).createHandler(broken)),
  );
  urls.brokenChat = await serveAll(
    asStreaming((await import('#functions/chat-completions.ts')).createHandler(broken)),
  );
});
afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
  await t?.stop();
});

const chatBody = { model: 'famA-v4.1-flash', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 };

const unknownUrl = async (res: Response) => {
  expect(res.status).toBe(404);
  expect(res.headers.get('x-request-id')).toMatch(/^req_/);
  const body = (await res.json()) as { error: { code: string } };
  expect(schemaErrors('ErrorResponse', body)).toBe('');
  expect(body.error.code).toBe('unknown_url');
};

describe("a function behind its Function URL, asked for a path that isn't its own", () => {
  it("refuses another endpoint's path with 404 unknown_url, not as a bad request of its own", async () => {
    const res = await fetch(`${urls.chat}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'svc-embed', input: 'hello' }),
    });
    await unknownUrl(res);
  });

  it('refuses any other path before looking at the key, and serves its own with or without a trailing slash', async () => {
    await unknownUrl(
      await fetch(`${urls.chat}/anything`, { method: 'POST', body: JSON.stringify(chatBody) }),
    );
    await unknownUrl(await fetch(`${urls.chat}/v1/nope`, { method: 'OPTIONS' }));
    await unknownUrl(await fetch(`${urls.models}/v1/foo`));
    for (const path of ['/v1/chat/completions', '/v1/chat/completions/']) {
      const res = await fetch(`${urls.chat}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(chatBody),
      });
      expect(res.status, path).toBe(200);
      expect(((await res.json()) as { object: string }).object).toBe('chat.completion');
    }
    expect(
      (await fetch(`${urls.models}/v1/models`, { headers: { authorization: `Bearer ${t.apiKey}` } })).status,
    ).toBe(200);
  });
});

describe('a function that cannot start (its settings refused)', () => {
  it('answers an OpenAI-shaped 500 with its request id, not the platform’s bare 502', async () => {
    const written: string[] = [];
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    const responses = [
      await fetch(`${urls.brokenModels}/v1/models`, { headers: { authorization: `Bearer ${t.apiKey}` } }),
      await fetch(`${urls.brokenChat}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(chatBody),
      }),
    ];
    stdout.mockRestore();
    // Said in the project's log line (a timestamp, so Lambda's log-level filter keeps it), by name and message only.
    const said = written
      .flatMap((w) => w.split('\n'))
      .filter((l) => l.includes('EMBEDDINGS_TABLE is not set'));
    expect(said.length).toBeGreaterThanOrEqual(2);
    for (const line of said)
      expect(JSON.parse(line)).toMatchObject({
        level: 'error',
        timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
        logger: 'Error: EMBEDDINGS_TABLE is not set',
      });
    for (const res of responses) {
      expect(res.status).toBe(500);
      expect(res.headers.get('x-request-id')).toMatch(/^req_/);
      expect(res.headers.get('access-control-allow-origin')).toBe('*');
      const body = (await res.json()) as { error: { type: string; message: string } };
      expect(schemaErrors('ErrorResponse', body)).toBe('');
      expect(body.error.type).toBe('server_error');
      // The cause stays in the function's log.
      expect(body.error.message).not.toContain('EMBEDDINGS_TABLE');
    }
  });
});

describe('the local host', () => {
  it('joins a repeated Authorization header as a Function URL does: two keys are no key', async () => {
    const url = new URL(`${t.stack.url}/v1/chat/completions`);
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          // Raw headers: the same name twice, as a client may send it (and Host, which Node adds only to an object).
          headers: [
            'host',
            url.host,
            'authorization',
            `Bearer ${t.apiKey}`,
            'authorization',
            'Bearer svc_live_someoneElse0000000000000000',
            'content-type',
            'application/json',
          ],
        },
        (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => {
            text += chunk.toString('utf8');
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify(chatBody));
    });
    expect(status, body).toBe(401);
    expect((JSON.parse(body) as { error: { code: string } }).error.code).toBe('invalid_api_key');
  });
});
