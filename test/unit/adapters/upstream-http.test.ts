import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientSafe, retryAfterMs, statusFailure, UpstreamHttp, WholeBody } from '#adapters/upstream/http.ts';
import { readAll, readJsonObject } from '#adapters/upstream/openai-http.ts';
import { UpstreamFailure } from '#core/fallback.ts';

/** A loopback upstream whose reply each test picks by path. */
const replies: Record<string, (req: IncomingMessage, res: ServerResponse) => void> = {
  '/ok': (req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'yes' });
      // Written in two pieces: the body is read whole, whatever the chunking.
      res.write('{"echo":');
      res.end(`${JSON.stringify(body)}}`);
    });
  },
  '/big': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(`"${'x'.repeat(4096)}"`);
  },
  '/cut': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    res.write('{"partial":');
    setTimeout(() => res.socket?.destroy(), 20);
  },
  '/slow': (_req, res) => {
    setTimeout(() => res.writeHead(200).end('{}'), 2_000);
  },
};

describe('UpstreamHttp.postWhole', () => {
  let server: Server;
  let origin: string;
  const http = new UpstreamHttp(4);
  beforeAll(async () => {
    server = createServer((req, res) => replies[req.url ?? '']?.(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await http.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const post = (
    path: string,
    limit = 1 << 20,
    extra: { signal?: AbortSignal; headersTimeoutMs?: number } = {},
  ) =>
    http.postWhole(
      {
        url: new URL(path, origin),
        headers: { 'content-type': 'application/json' },
        body: '{"q":1}',
        headersTimeoutMs: extra.headersTimeoutMs ?? 5_000,
        bodyTimeoutMs: 5_000,
        ...(extra.signal ? { signal: extra.signal } : {}),
      },
      limit,
    );

  it('resolves with the status, the headers and the whole body, which the adapters read as before', async () => {
    const response = await post('/ok');
    expect(response.statusCode).toBe(200);
    expect(response.headers['x-upstream']).toBe('yes');
    expect(await readJsonObject(response, 1024)).toEqual({ echo: '{"q":1}' });
    expect((await readAll(response, 1024)).toString()).toBe('{"echo":"{\\"q\\":1}"}');
  });

  it("hands a whole body over as it was read (no copy, no iteration), still held to the reader's own limit", async () => {
    const response = await post('/big');
    const body = response.body as WholeBody;
    expect(body).toBeInstanceOf(WholeBody);
    // Iterating would give the same bytes; readAll takes them as they are.
    body[Symbol.asyncIterator] = () => {
      throw new Error('iterated');
    };
    expect(await readAll(response, 1 << 20)).toBe(body.bytes);
    const error = await readAll(response, 1024).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamFailure);
    expect(error).toMatchObject({ kind: 'protocol' });
  });

  it('fails as a protocol fault past the size limit', async () => {
    const error = await post('/big', 1024).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamFailure);
    expect(error).toMatchObject({ kind: 'protocol' });
  });

  it('fails as a drop when the body is cut off mid-way', async () => {
    const error = await post('/cut').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamFailure);
    expect(error).toMatchObject({ kind: 'dropped' });
  });

  it('fails as a timeout when the headers do not come in time', async () => {
    const error = await post('/slow', 1024, { headersTimeoutMs: 100 }).catch((e: unknown) => e);
    expect(error).toMatchObject({ kind: 'timeout' });
  });

  it("ends on the caller's abort, before and during the call, as an abort (not an upstream fault)", async () => {
    const early = new AbortController();
    early.abort();
    await expect(post('/slow', 1024, { signal: early.signal })).rejects.toMatchObject({ name: 'AbortError' });
    const late = new AbortController();
    setTimeout(() => late.abort(), 50);
    const started = Date.now();
    await expect(post('/slow', 1024, { signal: late.signal })).rejects.toMatchObject({ name: 'AbortError' });
    expect(Date.now() - started).toBeLessThan(1_500); // not the upstream's 2 s
  });
});

describe('retryAfterMs: when a busy upstream says to come back', () => {
  const now = Date.parse('2026-11-29T12:00:00Z');

  it('reads retry-after-ms before retry-after, seconds, and HTTP dates', () => {
    expect(retryAfterMs({ 'retry-after-ms': '2500', 'retry-after': '3' }, now)).toBe(2500);
    expect(retryAfterMs({ 'retry-after': '7' }, now)).toBe(7000);
    expect(retryAfterMs({ 'retry-after': '1.5' }, now)).toBe(1500);
    expect(retryAfterMs({ 'retry-after': 'Sun, 29 Nov 2026 12:00:20 GMT' }, now)).toBe(20_000);
    expect(retryAfterMs({ 'retry-after': 'Sun, 29 Nov 2026 11:00:00 GMT' }, now)).toBe(0);
  });

  it('is null when the hint is missing or unusable', () => {
    for (const headers of [{}, { 'retry-after': '' }, { 'retry-after': 'soon' }, { 'retry-after': '-3' }])
      expect(retryAfterMs(headers, now)).toBeNull();
    // An unusable precise header falls back to the plain one.
    expect(retryAfterMs({ 'retry-after-ms': 'x', 'retry-after': '2' }, now)).toBe(2000);
    expect(retryAfterMs({ 'retry-after-ms': '', 'retry-after': '2' }, now)).toBe(2000);
  });
});

describe('statusFailure: what an upstream error tells routing and the client', () => {
  /** A response with this status and JSON body, as undici hands it over. */
  const response = (statusCode: number, body: unknown) => {
    const bytes = Buffer.from(JSON.stringify(body));
    return {
      statusCode,
      headers: {},
      body: Object.assign(
        (async function* () {
          yield bytes;
        })(),
        { destroy: () => {} },
      ),
    } as unknown as Parameters<typeof statusFailure>[0];
  };

  it('passes on a refusal of the request itself, which tells the client what to change', async () => {
    const message = "Invalid value for 'response_format': expected an object.";
    const failure = await statusFailure(
      response(400, {
        error: { message, type: 'invalid_request_error', code: 'invalid_value', param: 'response_format' },
      }),
    );
    expect(failure.kind).toBe('rejected');
    expect(failure.upstreamError).toEqual({
      message,
      type: 'invalid_request_error',
      code: 'invalid_value',
      param: 'response_format',
    });
  });

  it("takes a prompt too long for this provider's window as one another deployment may take, its words kept", async () => {
    const message =
      "This model's maximum context length is 128000 tokens. Please reduce the length of the messages.";
    const error = {
      message,
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
      param: 'messages',
    };
    const failure = await statusFailure(response(400, { error }));
    expect(failure.kind).toBe('unsupported');
    // What the client gets when every deployment says so.
    expect(failure.upstreamError).toEqual(error);
    // A proxy's size limit, JSON or not.
    const tooLarge = await statusFailure(response(413, '<html>Request Entity Too Large</html>'));
    expect(tooLarge.kind).toBe('unsupported');
    expect(tooLarge.upstreamError).toMatchObject({ code: 'request_too_large' });
  });

  it('takes busy for busy however it is said: 429 or 503 engine_overloaded, and 529', async () => {
    const busy = { error: { message: 'The engine is currently overloaded.', code: 'engine_overloaded' } };
    expect((await statusFailure(response(429, busy))).kind).toBe('overloaded');
    expect((await statusFailure(response(503, busy))).kind).toBe('overloaded');
    expect((await statusFailure(response(529, { error: { message: 'Overloaded' } }))).kind).toBe(
      'overloaded',
    );
    // Otherwise what the status says: a quota, a failure.
    expect((await statusFailure(response(429, { error: { message: 'Slow down' } }))).kind).toBe(
      'rate_limited',
    );
    expect((await statusFailure(response(503, { error: { message: 'Unavailable' } }))).kind).toBe(
      'server_error',
    );
  });

  it('masks keys, addresses and paths a verbose upstream puts in its message, and cuts it short', async () => {
    const failure = await statusFailure(
      response(422, {
        error: {
          message: `bad header authorization=Bearer sk-UPSTREAMSECRET0123456789 from http://10.0.3.7:8000/v1 in /srv/vllm/serving_chat.py; api_key=abc123456789 ${'x'.repeat(2_000)}`,
          code: 'x'.repeat(5_000),
          param: 'a\r\nb',
        },
      }),
    );
    const relayed = failure.upstreamError;
    expect(relayed?.message).not.toMatch(/UPSTREAMSECRET|10\.0\.3\.7|\/srv\/vllm|abc123456789/);
    expect(relayed?.message.length).toBeLessThanOrEqual(501);
    expect(relayed?.code).toBeNull();
    expect(relayed?.param).toBeNull();
  });

  it('leaves what tells the client which field to fix: schema and tool names, JSON pointers, dates', () => {
    for (const message of [
      "Invalid schema for response_format 'summary': In context=('properties', 'key_takeaways'), 'additionalProperties' is required to be supplied and to be false.",
      "Invalid schema for function 'call_api': In context=('properties', 'api_endpoint'), 'format' is not permitted.",
      "Invalid schema: #/properties/order/items/properties/sku: 'pattern' is not supported",
      'Invalid date 2024/01/15 in field start_date; expected an object with key: type',
      "Invalid schema for function 'search_knowledge_base_documents_v2': 'gpt-4o-realtime-preview-2024-12-17'",
      "Invalid schema: '/properties/address/properties/street' must have a type.",
      'Error at messages.0.content:12 unexpected char; user 550e8400-e29b-41d4-a716-446655440000',
    ])
      expect(clientSafe(message)).toBe(message);
  });

  it('masks the key formats of the common providers, and long mixed tokens of any other', () => {
    for (const key of [
      'gsk_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcd',
      'xai-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789',
      'hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345',
      'AIzaSyA-1234567890abcdefghijklmnopqrstu',
      'nvapi-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789',
      'sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ',
      '0123456789abcdef0123456789abcdef',
    ])
      expect(clientSafe(`the key ${key} is not allowed`)).toBe('the key [redacted] is not allowed');
    expect(clientSafe('host internal-llm.prod.svc.cluster.local:8000 refused')).toBe(
      'host [address] refused',
    );
    expect(clientSafe('secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY')).toBe('secret [redacted]');
  });

  it('masks the key the request presented, whatever its format, and any piece of it the upstream quoted', () => {
    const key = '3f2a9c1e-7b4d-4e8a-9f01-2c3d4e5f6a7b';
    // A UUID matches none of the format rules: only knowing the key finds it.
    expect(clientSafe(`Invalid request for key=${key}`)).toContain(key);
    expect(clientSafe(`Invalid request for key=${key} (tier free)`, key)).toBe(
      'Invalid request for [redacted] (tier free)',
    );
    expect(clientSafe('Incorrect API key provided: 3f2a9c1e***********6a7b.', key)).toBe(
      'Incorrect API key provided: [redacted]',
    );
    // Short keys (a local simulator's) mask nothing: eight characters in a row are needed to tell a quote.
    expect(clientSafe('the field simulator is unknown', 'sim')).toBe('the field simulator is unknown');
  });

  it('masks bare host names in private and cloud-internal domains', () => {
    expect(clientSafe('upstream internal-lb.prod.svc.cluster.local refused')).toBe(
      'upstream [address] refused',
    );
    expect(clientSafe('db at ip-10-0-0-1.ec2.internal is down')).toBe('db at [address] is down');
    expect(clientSafe('see my-db.abc123.us-east-1.rds.amazonaws.com')).toBe('see [address]');
  });

  it('passes on an error body with the key of the request masked', async () => {
    const key = 'b6f1c0de-0000-4aaa-8bbb-123456789abc';
    const failure = await statusFailure({
      ...response(400, { error: { message: `bad input for key ${key}`, code: 'invalid_value' } }),
      credential: key,
    });
    expect(failure.upstreamError?.message).toBe('bad input for key [redacted]');
  });

  it('lets no part of a key through where a long message is cut', () => {
    const key = '0123456789abcdef0123456789abcdef';
    // URLs shrink to `[url]` when masked, so the text around the 2,000th character reaches the client.
    const url = 'https://example.com/aaaaaaaaaaaaaaaa ';
    for (let at = 1_970; at < 2_000; at++) {
      const before = url.repeat(Math.floor(at / url.length)).padEnd(at, ' ');
      const relayed = clientSafe(`${before}${key} ${'y'.repeat(3_000)}`);
      expect(relayed.length).toBeLessThan(500);
      expect(relayed).not.toMatch(/0123456/);
    }
  });

  it('drops a code or param that carries a key, rather than relay it masked or whole', async () => {
    const key = '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';
    const failure = await statusFailure({
      ...response(400, { error: { message: 'bad input', code: key, param: 'sk-proj1234567890abcdefghij' } }),
      credential: key,
    });
    expect(failure.kind).toBe('rejected');
    expect(failure.upstreamError).toMatchObject({ message: 'bad input', code: null, param: null });
  });

  it("takes a 429 for a request too large for our key's quota as one this deployment cannot take, not as load", async () => {
    const failure = await statusFailure(
      response(429, {
        error: {
          message:
            'Request too large for gpt-4o in organization org-Ab12Cd34Ef56Gh78Ij90Kl12 on tokens per min (TPM): Limit 30000, Requested 52000.',
          type: 'tokens',
          code: 'rate_limit_exceeded',
        },
      }),
    );
    // Another deployment may take it; if none can, the client gets our 400, naming neither org nor upstream model.
    expect(failure.kind).toBe('unsupported');
    expect(failure.status).toBe(429);
    expect(failure.upstreamError).toMatchObject({ code: 'request_too_large', type: 'invalid_request_error' });
    expect(failure.upstreamError?.message).not.toMatch(/gpt-4o|org-/);
    // A quota merely spent for now is still a busy key.
    const spent = await statusFailure(
      response(429, { error: { message: 'Rate limit reached for requests', code: 'rate_limit_exceeded' } }),
    );
    expect(spent.kind).toBe('rate_limited');
  });

  it('reads what the status alone would misjudge: the deployment at fault, or the request, whichever it is', async () => {
    const failureOf = (status: number, error: Record<string, unknown>) =>
      statusFailure(response(status, { error: { message: 'x', ...error } }));
    // OpenRouter: no endpoint behind this deployment supports the request — another deployment may.
    const noEndpoint = await failureOf(404, { message: 'No endpoints found that support tool use.' });
    expect(noEndpoint.kind).toBe('unsupported');
    expect(noEndpoint.upstreamError).toMatchObject({ code: 'unsupported_request' });
    // A provider's moderation: the request's content, passed on as a 400 in our words (no provider named).
    const flagged = await failureOf(403, {
      message: 'famX requires moderation on ProviderY. Your input was flagged for "harassment".',
    });
    expect(flagged.kind).toBe('rejected');
    expect(flagged.upstreamError).toMatchObject({ code: 'content_policy_violation' });
    expect(flagged.upstreamError?.message).not.toMatch(/ProviderY|harassment/);
    // A retired or unknown upstream model, by its code: the deployment's, not the client's 400.
    expect((await failureOf(400, { code: 'model_decommissioned' })).kind).toBe('server_error');
    expect((await failureOf(400, { code: 'model_not_found' })).kind).toBe('server_error');
    // OpenRouter's other 404: the deployment's model is gone — its fault, which health must see.
    expect((await failureOf(404, { message: 'No endpoints found for famX-1.' })).kind).toBe('server_error');
    // A message quoting the client's request reads as nothing but the request's fault.
    const quoted = await failureOf(400, {
      message: "Invalid schema for function 'api-key': the key is invalid.",
      code: 'invalid_function_parameters',
    });
    expect(quoted.kind).toBe('rejected');
    // What the status says stays: a plain 403 is our key, a plain 404 the deployment, a 400 the request.
    expect((await failureOf(403, { message: 'Forbidden' })).kind).toBe('auth');
    expect((await failureOf(404, { message: 'Not found' })).kind).toBe('server_error');
    expect((await failureOf(400, { message: 'messages: too long', code: 'invalid_value' })).kind).toBe(
      'rejected',
    );
  });

  it("takes a 402 for our provider account's fault, which another key or deployment may not have", async () => {
    const failure = await statusFailure(
      response(402, { error: { message: 'org-SECRETORG has insufficient credits (balance $0.42)' } }),
    );
    expect(failure.kind).toBe('auth');
  });
});
