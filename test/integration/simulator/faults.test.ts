import { performance } from 'node:perf_hooks';
import { describe, expect, test } from 'vitest';
import { OVERLOADED_ERROR, SERVER_ERROR } from '#sim/errors.ts';
import {
  type FaultSpec,
  FaultStore,
  FaultSyntaxError,
  parseInlineDirectives,
  readHeaderDirectives,
  resolveFaultPlan,
  validateFaultSpec,
} from '#sim/faults.ts';
import { startSimulator } from '#sim/server.ts';
import { isSocketError, postChat, readSse, readText, settle, userChat } from './client.ts';
import { useSimulator } from './use-simulator.ts';

const sim = useSimulator();

const streamBody = (content = 'stream me', extra: Record<string, unknown> = {}) =>
  userChat(content, { stream: true, ...extra });

function putFaults(provider: string, spec: unknown): Promise<Response> {
  return fetch(`${sim().url}/_sim/faults/${provider}`, { method: 'PUT', body: JSON.stringify(spec) });
}

describe('error faults', () => {
  test('overloaded answers 429 with exactly the OpenAI engine_overloaded body', async () => {
    sim().setFaults('sim-a', { error: 'overloaded' });
    const response = await postChat(sim().url, userChat('hi'), { provider: 'sim-a' });
    expect(response.status).toBe(429);
    expect(await response.text()).toBe(
      '{"error":{"message":"The model is currently busy with other requests. Please retry later.",' +
        '"type":"invalid_request_error","param":null,"code":"engine_overloaded"}}',
    );
    expect(OVERLOADED_ERROR.error.code).toBe('engine_overloaded');
  });

  test('server_error answers 500 with the OpenAI server_error body', async () => {
    sim().setFaults('sim-a', { error: 'server_error' });
    const response = await postChat(sim().url, userChat('hi'), { provider: 'sim-a' });
    expect(response.status).toBe(500);
    expect(await response.json()).toEqual({
      error: {
        message: 'The server had an error while processing your request.',
        type: 'server_error',
        param: null,
        code: null,
      },
    });
    expect(SERVER_ERROR.error.type).toBe('server_error');
  });

  test('unauthorized answers 401 invalid_api_key even with a key', async () => {
    sim().setFaults('sim-a', { error: 'unauthorized' });
    const response = await postChat(sim().url, userChat('hi'), { provider: 'sim-a' });
    expect(response.status).toBe(401);
    expect(await response.json()).toEqual({
      error: {
        message: expect.any(String),
        type: 'invalid_request_error',
        param: null,
        code: 'invalid_api_key',
      },
    });
  });

  test('drop_before closes the connection without any response', async () => {
    sim().setFaults('sim-a', { error: 'drop_before' });
    const { value, error } = await settle(postChat(sim().url, userChat('hi'), { provider: 'sim-a' }));
    expect(value).toBeNull();
    expect(isSocketError(error)).toBe(true);
    expect(sim().calls('sim-a').at(-1)?.fault).toBe('drop_before');
  });

  test('drop_mid on a stream sends two data events by default, then fails without [DONE]', async () => {
    sim().setFaults('sim-a', { error: 'drop_mid' });
    const response = await postChat(sim().url, streamBody(), { provider: 'sim-a' });
    expect(response.status).toBe(200);
    const { data, error } = await readSse(response);
    expect(data).toHaveLength(2);
    expect(data).not.toContain('[DONE]');
    expect(isSocketError(error)).toBe(true);
  });

  test('drop_mid on a stream honours dropAfterChunks and chunk delays', async () => {
    sim().setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 4, chunkDelayMs: 5 });
    const response = await postChat(sim().url, streamBody(), { provider: 'sim-a' });
    const { data, error } = await readSse(response);
    expect(data).toHaveLength(4);
    expect(isSocketError(error)).toBe(true);
  });

  test('drop_mid on a non-streamed request sends 200 and about half the body before failing', async () => {
    const whole = await (await postChat(sim().url, userChat('same body'))).text();
    sim().setFaults('sim-a', { error: 'drop_mid' });
    const response = await postChat(sim().url, userChat('same body'), { provider: 'sim-a' });
    expect(response.status).toBe(200);
    const { text, error } = await readText(response);
    expect(isSocketError(error)).toBe(true);
    expect(text.length).toBeGreaterThan(whole.length / 4);
    expect(text.length).toBeLessThan(whole.length);
    expect(() => JSON.parse(text)).toThrow();
  });

  test('faults are recorded in the call log', async () => {
    sim().setFaults('sim-a', { error: 'overloaded' });
    await postChat(sim().url, userChat('hi'), { provider: 'sim-a', key: 'sk-a' });
    await postChat(sim().url, userChat('hi'), { provider: 'sim-b', key: 'sk-b' });
    expect(
      sim()
        .calls()
        .map(({ provider, key, fault }) => ({ provider, key, fault })),
    ).toEqual([
      { provider: 'sim-a', key: 'sk-a', fault: 'overloaded' },
      { provider: 'sim-b', key: 'sk-b', fault: null },
    ]);
  });
});

describe('fault scoping', () => {
  test('a provider fault leaves other providers and the default route alone', async () => {
    sim().setFaults('sim-a', { error: 'server_error' });
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-b' })).status).toBe(200);
    expect((await postChat(sim().url, userChat('hi'))).status).toBe(200);
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a' })).status).toBe(500);
  });

  test('a counted fault fails the next N requests and then expires', async () => {
    sim().setFaults('sim-a', { error: 'overloaded', count: 2 });
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const response = await postChat(sim().url, userChat('hi'), { provider: 'sim-a' });
      await response.arrayBuffer();
      statuses.push(response.status);
    }
    expect(statuses).toEqual([429, 429, 200, 200]);
  });

  test('a keyed fault only applies to requests made with one of its keys', async () => {
    sim().setFaults('sim-a', { error: 'unauthorized', keys: ['sk-revoked'] });
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a', key: 'sk-revoked' })).status).toBe(
      401,
    );
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a', key: 'sk-good' })).status).toBe(
      200,
    );
  });

  test('requests with other keys do not use up a keyed, counted fault', async () => {
    sim().setFaults('sim-a', { error: 'overloaded', keys: ['sk-x'], count: 1 });
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a', key: 'sk-y' })).status).toBe(200);
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a', key: 'sk-x' })).status).toBe(429);
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a', key: 'sk-x' })).status).toBe(200);
  });

  test('setting null clears a provider fault and resetFaults clears them all', async () => {
    sim().setFaults('sim-a', { error: 'server_error' });
    sim().setFaults('sim-b', { error: 'server_error' });
    sim().setFaults('sim-a', null);
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a' })).status).toBe(200);
    sim().resetFaults();
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-b' })).status).toBe(200);
  });
});

describe('per-request fault headers', () => {
  test('x-sim-fault injects an error without any provider spec', async () => {
    const response = await postChat(sim().url, userChat('hi'), { headers: { 'x-sim-fault': 'overloaded' } });
    expect(response.status).toBe(429);
    expect(await response.json()).toEqual(OVERLOADED_ERROR);
  });

  test('x-sim-drop-after-chunks overrides the provider value field by field', async () => {
    sim().setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 5 });
    const response = await postChat(sim().url, streamBody(), {
      provider: 'sim-a',
      headers: { 'x-sim-drop-after-chunks': '1' },
    });
    const { data, error } = await readSse(response);
    expect(data).toHaveLength(1);
    expect(isSocketError(error)).toBe(true);
  });

  test('x-sim-fault none cancels a provider fault for that request', async () => {
    sim().setFaults('sim-a', { error: 'server_error' });
    const response = await postChat(sim().url, userChat('hi'), {
      provider: 'sim-a',
      headers: { 'x-sim-fault': 'none' },
    });
    expect(response.status).toBe(200);
  });

  test('x-sim-latency-ms delays the response', async () => {
    const started = performance.now();
    const response = await postChat(sim().url, userChat('hi'), { headers: { 'x-sim-latency-ms': '60' } });
    expect(response.status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(59);
  });

  test('x-sim-chunk-delay-ms spaces out stream events', async () => {
    const started = performance.now();
    const response = await postChat(sim().url, streamBody(), {
      headers: { 'x-sim-chunk-delay-ms': '20', 'x-sim-completion-tokens': '3' },
    });
    const { data } = await readSse(response);
    // role, 3 words, finish and [DONE]: 6 events, so 5 gaps of 20 ms.
    expect(data).toHaveLength(6);
    expect(performance.now() - started).toBeGreaterThanOrEqual(99);
  });

  test('a malformed fault header is rejected with 400 rather than ignored', async () => {
    const response = await postChat(sim().url, userChat('hi'), { headers: { 'x-sim-fault': 'explode' } });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { message: string; type: string } };
    expect(body.error.type).toBe('invalid_request_error');
    expect(body.error.message).toContain('x-sim-fault');
  });
});

describe('inline [[sim: ...]] directives', () => {
  test('a directive in message text injects a mid-stream drop', async () => {
    const body = streamBody(
      'Hello [[sim: fault=drop_mid drop_after_chunks=3 chunk_delay_ms=5 latency_ms=10]]',
    );
    const response = await postChat(sim().url, body);
    expect(response.status).toBe(200);
    const { data, error } = await readSse(response);
    expect(data).toHaveLength(3);
    expect(isSocketError(error)).toBe(true);
  });

  test('error_mid: the chunks, then an error event, and a clean end without [DONE]; a whole reply gets a 500', async () => {
    const response = await postChat(
      sim().url,
      streamBody('Hello [[sim: fault=error_mid drop_after_chunks=2]]'),
    );
    expect(response.status).toBe(200);
    const { data, error } = await readSse(response);
    expect(error).toBeNull();
    expect(data).toHaveLength(3);
    expect(JSON.parse(data.at(-1) as string)).toMatchObject({ error: { type: 'server_error' } });
    expect((await postChat(sim().url, userChat('Hello [[sim: fault=error_mid]]'))).status).toBe(500);
  });

  test('a directive in a text content part injects an error', async () => {
    const body = {
      model: 'gpt-4o',
      messages: [{ role: 'user', content: [{ type: 'text', text: '[[sim: fault=overloaded]] hi' }] }],
    };
    expect((await postChat(sim().url, body)).status).toBe(429);
  });

  test('request headers win over an inline directive', async () => {
    const response = await postChat(sim().url, userChat('[[sim: fault=server_error]]'), {
      headers: { 'x-sim-fault': 'none' },
    });
    expect(response.status).toBe(200);
  });

  test('an unknown directive key is rejected with 400', async () => {
    const response = await postChat(sim().url, userChat('[[sim: fualt=overloaded]]'));
    expect(response.status).toBe(400);
  });

  test('parses every documented key, merging several directives in order', () => {
    expect(
      parseInlineDirectives(
        'a [[sim: fault=drop_mid drop_after_chunks=3 chunk_delay_ms=5]] b [[sim: latency_ms=10 first_byte_delay_ms=0 ' +
          'completion_tokens=7 chunk_delay_ms=6]]',
      ),
    ).toEqual({
      error: 'drop_mid',
      dropAfterChunks: 3,
      chunkDelayMs: 6,
      latencyMs: 10,
      firstByteDelayMs: 0,
      completionTokens: 7,
    });
    expect(parseInlineDirectives('no directive here')).toBeNull();
    expect(() => parseInlineDirectives('[[sim: latency_ms=-1]]')).toThrow(FaultSyntaxError);
  });
});

describe('delays', () => {
  test('firstByteDelayMs holds back the response headers', async () => {
    sim().setFaults('sim-a', { firstByteDelayMs: 80 });
    const started = performance.now();
    const response = await postChat(sim().url, streamBody(), { provider: 'sim-a' });
    const headersAfter = performance.now() - started;
    await readSse(response);
    expect(response.status).toBe(200);
    expect(headersAfter).toBeGreaterThanOrEqual(79);
  });

  test('the simulator-wide latencyMs option delays every call', async () => {
    const slow = await startSimulator({ latencyMs: 50 });
    try {
      const started = performance.now();
      const response = await postChat(slow.url, userChat('hi'));
      expect(response.status).toBe(200);
      expect(performance.now() - started).toBeGreaterThanOrEqual(49);
    } finally {
      await slow.close();
    }
  });
});

describe('the admin fault API', () => {
  test('PUT /_sim/faults/<provider> sets faults and a null body clears them', async () => {
    expect((await putFaults('sim-a', { error: 'overloaded' })).status).toBe(200);
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a' })).status).toBe(429);
    expect((await putFaults('sim-a', null)).status).toBe(200);
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a' })).status).toBe(200);
  });

  test('DELETE /_sim/faults clears every provider', async () => {
    await putFaults('sim-a', { error: 'overloaded' });
    await putFaults('sim-b', { error: 'overloaded' });
    expect((await fetch(`${sim().url}/_sim/faults`, { method: 'DELETE' })).status).toBe(200);
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a' })).status).toBe(200);
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-b' })).status).toBe(200);
  });

  test('an invalid fault spec is rejected with 400 and changes nothing', async () => {
    for (const spec of [
      { error: 'boom' },
      { latencyMs: -5 },
      { count: 0 },
      { keys: 'sk' },
      { typo: 1 },
      [1],
    ]) {
      const response = await putFaults('sim-a', spec);
      expect(response.status).toBe(400);
      expect(((await response.json()) as { error: { type: string } }).error.type).toBe(
        'invalid_request_error',
      );
    }
    expect((await postChat(sim().url, userChat('hi'), { provider: 'sim-a' })).status).toBe(200);
  });

  test('setFaults throws on an invalid spec', () => {
    expect(() => sim().setFaults('sim-a', { error: 'boom' } as unknown as FaultSpec)).toThrow(
      FaultSyntaxError,
    );
  });
});

describe('fault resolution', () => {
  test('per-request overrides replace provider fields one by one', () => {
    expect(
      resolveFaultPlan(
        { error: 'drop_mid', chunkDelayMs: 5, latencyMs: 1 },
        { chunkDelayMs: 9 },
        { latencyMs: 2 },
      ),
    ).toEqual({
      error: 'drop_mid',
      chunkDelayMs: 9,
      latencyMs: 2,
      firstByteDelayMs: 0,
      dropAfterChunks: 2,
      completionTokens: null,
      omitUsage: false,
    });
  });

  test('a store entry with a count expires after that many matching takes', () => {
    const store = new FaultStore();
    store.set('p', { error: 'overloaded', count: 2, keys: ['k'] });
    expect(store.take('p', 'other')).toBeNull();
    expect(store.take('p', 'k')?.error).toBe('overloaded');
    expect(store.take('p', 'k')?.error).toBe('overloaded');
    expect(store.take('p', 'k')).toBeNull();
  });
});

describe('omit_usage', () => {
  test('is read from the header and inline directives as 0 or 1, and from a provider spec', () => {
    expect(readHeaderDirectives({ 'x-sim-omit-usage': '1' })).toEqual({ omitUsage: true });
    expect(readHeaderDirectives({ 'x-sim-omit-usage': '0' })).toEqual({ omitUsage: false });
    expect(parseInlineDirectives('[[sim: omit-usage=1 fault=none]]')).toEqual({
      omitUsage: true,
      error: null,
    });
    expect(() => parseInlineDirectives('[[sim: omit_usage=true]]')).toThrow(FaultSyntaxError);
    expect(() => readHeaderDirectives({ 'x-sim-omit-usage': '2' })).toThrow(FaultSyntaxError);
    expect(validateFaultSpec({ omitUsage: true })).toEqual({ omitUsage: true });
    expect(() => validateFaultSpec({ omitUsage: 1 })).toThrow(FaultSyntaxError);
    expect(resolveFaultPlan(null).omitUsage).toBe(false);
    expect(resolveFaultPlan({ omitUsage: true }, { omitUsage: false }).omitUsage).toBe(false);
    expect(resolveFaultPlan({ omitUsage: true }, { latencyMs: 1 }).omitUsage).toBe(true);
  });

  test('leaves the usage out of a chat completion', async () => {
    const response = await postChat(sim().url, userChat('no usage [[sim: omit_usage=1]]'));
    expect(response.status).toBe(200);
    const completion = (await response.json()) as Record<string, unknown>;
    expect(completion).not.toHaveProperty('usage');
    expect(completion.choices).toHaveLength(1);
  });

  test('leaves the usage chunk out of a stream that asked for it', async () => {
    const body = streamBody('no usage', { stream_options: { include_usage: true } });
    const withUsage = await readSse(await postChat(sim().url, body));
    const without = await readSse(await postChat(sim().url, body, { headers: { 'x-sim-omit-usage': '1' } }));
    expect(without.data).toHaveLength(withUsage.data.length - 1);
    expect(without.data.at(-1)).toBe('[DONE]');
    for (const payload of without.data.slice(0, -1)) {
      expect((JSON.parse(payload) as { usage: unknown }).usage).toBeNull();
    }
  });
});
