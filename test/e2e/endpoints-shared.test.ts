import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { makeWav } from '#test/audio.ts';
import { newAccount } from '#test/billing.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * Every inference endpoint runs the same pipeline as chat — authentication, the whitelist, model resolution,
 * admission (limits and the wallet hold), fallback across deployments, the error contract — so every one of
 * them is held to the same behaviour here, case by case.
 */

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ functionEnv: { ACCOUNT_CACHE_TTL_MS: '0' } });
});
afterAll(() => t?.stop());
afterEach(() => t.simulator.resetFaults());

const WAV = makeWav({ durationMs: 1500 });

interface Options {
  readonly key: string;
  readonly model?: string;
  /** An extra, undocumented parameter the endpoint must refuse. */
  readonly extra?: readonly [string, string];
}

interface Case {
  readonly endpoint: string;
  readonly model: string;
  /** The endpoint's kind of model, as its 404 for another kind names it. */
  readonly kind: string;
  readonly call: (options: Options) => Promise<Response>;
  /** Checks a successful response's body. */
  readonly ok: (response: Response) => Promise<void>;
}

const json = (path: string, body: Record<string, unknown>) => (o: Options) =>
  fetch(`${t.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${o.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      ...body,
      ...(o.model ? { model: o.model } : {}),
      ...Object.fromEntries(o.extra ? [o.extra] : []),
    }),
  });

const cases: Case[] = [
  {
    endpoint: '/chat/completions',
    model: 'famA-v4.1-flash',
    kind: 'a chat',
    call: (o) =>
      json('/chat/completions', {
        model: 'famA-v4.1-flash',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 16,
      })(o),
    ok: async (r) => expect(((await r.json()) as { object: string }).object).toBe('chat.completion'),
  },
  {
    endpoint: '/embeddings',
    model: 'svc-embed',
    kind: 'an embedding',
    call: (o) => json('/embeddings', { model: 'svc-embed', input: 'hello world' })(o),
    ok: async (r) => expect(((await r.json()) as { data: unknown[] }).data).toHaveLength(1),
  },
  {
    endpoint: '/audio/transcriptions',
    model: 'svc-stt',
    kind: 'a transcription',
    call: (o) => {
      const form = new FormData();
      form.set('file', new Blob([WAV], { type: 'audio/wav' }), 'hello.wav');
      form.set('model', o.model ?? 'svc-stt');
      if (o.extra) form.set(o.extra[0], o.extra[1]);
      return fetch(`${t.baseURL}/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${o.key}` },
        body: form,
      });
    },
    ok: async (r) => expect(typeof ((await r.json()) as { text: unknown }).text).toBe('string'),
  },
  {
    endpoint: '/audio/speech',
    model: 'svc-tts',
    kind: 'a speech',
    call: (o) =>
      json('/audio/speech', {
        model: 'svc-tts',
        input: 'Hello there.',
        voice: 'alloy',
        response_format: 'wav',
      })(o),
    ok: async (r) => {
      expect(r.headers.get('content-type')).toBe('audio/wav');
      expect(
        Buffer.from(await r.arrayBuffer())
          .subarray(0, 4)
          .toString('latin1'),
      ).toBe('RIFF');
    },
  },
];

/** A fresh account with a key; funded (hence trusted) when `usd` is given. */
const account = (usd?: number) => newAccount(t, usd ? { usd } : {});

const errorOf = async (response: Response) =>
  (
    (await response.json()) as {
      error: { type: string; code: string | null; param: string | null; message: string };
    }
  ).error;

describe.each(cases)('POST /v1$endpoint, as chat', ({ model, kind, call, ok }) => {
  it('serves the call, with the request id, the serving provider and the limit headers', async () => {
    const { key } = await account(5);
    const response = await call({ key });
    expect(response.status).toBe(200);
    expect(response.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
    expect(response.headers.get('x-svc-provider')).toBe('sim-a');
    expect(response.headers.get('x-svc-served-model')).toBe(model);
    for (const kind of ['requests', 'tokens']) {
      expect(Number(response.headers.get(`x-ratelimit-limit-${kind}`))).toBeGreaterThan(0);
      expect(response.headers.get(`x-ratelimit-remaining-${kind}`)).toMatch(/^\d+$/);
      expect(response.headers.get(`x-ratelimit-reset-${kind}`)).toBeTruthy();
    }
    await ok(response);
  });

  it('refuses a missing or unknown key with 401 invalid_api_key', async () => {
    for (const key of ['', 'svc_live_nobodyHasThisKey0000000000']) {
      const response = await call({ key });
      expect(response.status).toBe(401);
      expect(await errorOf(response)).toMatchObject({ code: 'invalid_api_key' });
    }
  });

  it('checks the key before the body, as OpenAI does: a bad key with a bad body is a 401', async () => {
    for (const key of ['', 'svc_live_nobodyHasThisKey0000000000']) {
      const response = await call({ key, extra: ['thinking', 'on'] });
      expect(response.status).toBe(401);
      expect(await errorOf(response)).toMatchObject({ code: 'invalid_api_key' });
    }
  });

  it('refuses an undocumented parameter with 400 naming it', async () => {
    const { key } = await account(5);
    const response = await call({ key, extra: ['thinking', 'on'] });
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({ code: 'unsupported_parameter', param: 'thinking' });
  });

  it('answers 404 model_not_found for an unknown model and for a model of another kind', async () => {
    const { key } = await account(5);
    const unknown = await call({ key, model: 'famZ-nonexistent' });
    expect(unknown.status).toBe(404);
    expect(await errorOf(unknown)).toMatchObject({ code: 'model_not_found' });
    const other = model === 'famA-v4.1-flash' ? 'svc-embed' : 'famA-v4.1-flash';
    const otherKind = await call({ key, model: other });
    expect(otherKind.status).toBe(404);
    expect(await errorOf(otherKind)).toMatchObject({
      code: 'model_not_found',
      message: `The model \`${other}\` is not ${kind} model and cannot be used with this endpoint.`,
    });
  });

  it('refuses with 402 when the wallet cannot cover the hold, and calls no upstream', async () => {
    const { key } = await account();
    t.simulator.clearCalls();
    const response = await call({ key });
    expect(response.status).toBe(402);
    const error = (await response.json()) as {
      error: { code: string; required_usd: number; available_usd: number };
    };
    expect(error.error).toMatchObject({ code: 'insufficient_balance', available_usd: 0 });
    expect(error.error.required_usd).toBeGreaterThan(0);
    expect(t.simulator.calls()).toHaveLength(0);
  });

  it('refuses with 429 rate_limit_exceeded and Retry-After beyond the account’s requests per minute', async () => {
    const { id, key } = await account(5);
    await t.stack.container.accounting.setQuota(id, { rpm: 1 }, Date.now());
    expect((await call({ key })).status).toBe(200);
    const refused = await call({ key });
    expect(refused.status).toBe(429);
    expect(await errorOf(refused)).toMatchObject({ type: 'requests', code: 'rate_limit_exceeded' });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it.each(['overloaded', 'server_error', 'drop_before'] as const)(
    'falls back to the next provider when the first fails with %s',
    async (error) => {
      const { key } = await account(5);
      t.simulator.setFaults('sim-a', { error });
      const response = await call({ key });
      expect(response.status).toBe(200);
      expect(response.headers.get('x-svc-provider')).toBe('sim-b');
      await ok(response);
    },
  );

  it('answers 429 engine_overloaded when every deployment is overloaded', async () => {
    const { key } = await account(5);
    t.simulator.setFaults('sim-a', { error: 'overloaded' });
    t.simulator.setFaults('sim-b', { error: 'overloaded' });
    const response = await call({ key });
    expect(response.status).toBe(429);
    expect(await errorOf(response)).toMatchObject({ code: 'engine_overloaded' });
  });
});

describe('the key before the body, on every endpoint', () => {
  it.each(cases.map((c) => c.endpoint))(
    '%s: a caller without a valid key gets 401 however its body is encoded, and nothing is decompressed for it',
    async (endpoint) => {
      const form = new FormData();
      form.set('file', new Blob([WAV], { type: 'audio/wav' }), 'hello.wav');
      form.set('model', 'svc-stt');
      const body = endpoint === '/audio/transcriptions' ? form : '{"model":"x"}';
      for (const encoding of ['bogus', 'gzip']) {
        const response = await fetch(`${t.baseURL}${endpoint}`, {
          method: 'POST',
          headers: {
            authorization: 'Bearer svc_live_nobodyHasThisKey0000000000',
            'content-encoding': encoding,
            ...(typeof body === 'string' ? { 'content-type': 'application/json' } : {}),
          },
          body,
        });
        // Not 400 "unsupported/invalid Content-Encoding": that would be decoding for an anonymous caller.
        expect(response.status).toBe(401);
        expect(await errorOf(response)).toMatchObject({ code: 'invalid_api_key' });
      }
    },
  );
});
