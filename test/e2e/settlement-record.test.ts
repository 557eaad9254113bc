import { ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { costOf } from '#core/pricing.ts';
import { localClientConfig } from '#local/emulators.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { sseEvents } from '#test/sse.ts';
import {
  drainSettlements,
  NO_CIRCUIT_BREAKING,
  startTestStack,
  type TestStack,
  takeSettlements,
  takeSettlementsOf,
} from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ functionEnv: NO_CIRCUIT_BREAKING });
});
afterAll(() => t?.stop());
beforeEach(() => drainSettlements(t.stack));
afterEach(() => t.simulator.resetFaults());

const body = (extra: Record<string, unknown> = {}) => ({
  model: 'famA-v4.1-flash',
  messages: [{ role: 'user', content: 'hello' }],
  ...extra,
});

/** A streamed chat call with this prompt, read by hand, and how to hang up on it. */
const readableStream = async (content: string) => {
  const controller = new AbortController();
  const res = await fetch(`${t.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body({ stream: true, messages: [{ role: 'user', content }] })),
    signal: controller.signal,
  });
  return { reader: (res.body as ReadableStream<Uint8Array>).getReader(), leave: () => controller.abort() };
};

/** Sends a call and hangs up 150 ms later, while the upstream is still working on it. */
const abandoned = async (path: string, payload: unknown) => {
  const controller = new AbortController();
  const sent = fetch(`${t.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(payload),
    signal: controller.signal,
  }).catch(() => null);
  await new Promise((resolve) => setTimeout(resolve, 150));
  controller.abort();
  await sent;
};

describe('the settlement record', () => {
  it('describes a successful non-stream call completely', async () => {
    const res = await t.post('/chat/completions', body());
    const completion = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    const [record] = await takeSettlements(t.stack, 1);
    const model = await t.stack.container.registry.catalog().then((c) => c.models.get('famA-v4.1-flash'));
    expect(record).toMatchObject({
      v: 1,
      id: res.headers.get('x-request-id'),
      requestId: res.headers.get('x-request-id'),
      endpoint: 'chat.completions',
      accountId: 'acct_demo',
      keyPrefix: t.apiKey.slice(0, 17),
      model: 'famA-v4.1-flash',
      deployment: 'famA-v4.1-flash@sim-a',
      provider: 'sim-a',
      stream: false,
      status: 200,
      outcome: 'success',
      fault: null,
      admission: {
        hold: { id: res.headers.get('x-request-id'), amount: expect.any(Number) },
        estimatedTokens: expect.any(Number),
      },
      usage: {
        promptTokens: completion.usage.prompt_tokens,
        completionTokens: completion.usage.completion_tokens,
        cachedPromptTokens: 0,
        source: 'upstream',
      },
    });
    if (!model || !record?.usage) throw new Error('expected a model and a usage record');
    expect(record.cost).toBe(costOf(model, record.usage));
    expect(record?.cost).toBeGreaterThan(0);
    expect(record?.attempts).toEqual([
      expect.objectContaining({ deployment: 'famA-v4.1-flash@sim-a', outcome: 'ok' }),
    ]);
    expect(record?.timings.totalMs).toBeGreaterThanOrEqual(record?.timings.firstByteMs ?? Number.NaN);
  });

  it('carries the upstream usage of a stream even when the client did not ask for it', async () => {
    await (await t.post('/chat/completions', body({ stream: true }))).text();
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ stream: true, outcome: 'success', usage: { source: 'upstream' } });
    expect(record?.usage?.completionTokens).toBeGreaterThan(0);
  });

  it('is sent only after the client’s stream has ended', async () => {
    const res = await t.post(
      '/chat/completions',
      body({
        stream: true,
        messages: [{ role: 'user', content: 'slowly [[sim: chunk_delay_ms=150 completion_tokens=8]]' }],
      }),
    );
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    const sqs = new SQSClient(localClientConfig(t.stack.emulators.sqs));
    const during = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: t.stack.resources.settlementQueueUrl,
        WaitTimeSeconds: 0,
        VisibilityTimeout: 0,
      }),
    );
    sqs.destroy();
    expect(during.Messages ?? []).toHaveLength(0);
    while (!(await reader.read()).done) {
      // drain
    }
    expect(await takeSettlements(t.stack, 1)).toHaveLength(1);
  });

  it('records every attempt and the fault when all deployments fail', async () => {
    t.simulator.setFaults('sim-a', { error: 'server_error' });
    t.simulator.setFaults('sim-b', { error: 'drop_before' });
    expect((await t.post('/chat/completions', body())).status).toBe(500);
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ status: 500, outcome: 'upstream_error', cost: 0, usage: null });
    expect(record?.attempts.map((a) => `${a.provider}:${a.outcome}`)).toEqual([
      'sim-a:server_error',
      'sim-a:server_error',
      'sim-b:dropped',
    ]);
    expect(record?.fault?.kind).toBe('dropped');
  });

  it('marks a stream broken mid-way as interrupted and charges nothing', async () => {
    t.simulator.setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 3 });
    await (await t.post('/chat/completions', body({ stream: true }))).text();
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({
      status: 200,
      outcome: 'stream_interrupted',
      cost: 0,
      fault: { kind: 'dropped' },
    });
  });

  it('charges a client that walks away for what was produced', async () => {
    const { reader, leave } = await readableStream('x [[sim: chunk_delay_ms=100 completion_tokens=30]]');
    await reader.read();
    await reader.read();
    leave();
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ outcome: 'client_aborted', usage: { source: 'estimated' } });
    // Some of the output was produced and relayed before the client left, and it is charged; not all of it.
    expect(record?.usage?.completionTokens).toBeGreaterThanOrEqual(1);
    expect(record?.usage?.completionTokens).toBeLessThan(30);
    expect(record?.cost).toBeGreaterThan(0);
  });

  it.each([
    [
      'chat stream',
      '/chat/completions',
      body({ stream: true, messages: [{ role: 'user', content: 'x [[sim: first_byte_delay_ms=400]]' }] }),
    ],
    [
      'speech',
      '/audio/speech',
      { model: 'svc-tts', input: 'hello there [[sim: first_byte_delay_ms=400]]', voice: 'alloy' },
    ],
  ])(
    'charges a %s whose client hangs up before the first byte as abandoned, not as our failure',
    async (_, path, payload) => {
      // Gone while the gateway still waits for the upstream's first byte.
      await abandoned(path, payload);
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({ outcome: 'client_aborted', fault: { kind: 'client' } });
      expect(record?.cost).toBeGreaterThan(0);
      if (path === '/chat/completions')
        expect(record?.usage).toMatchObject({ completionTokens: 0, source: 'estimated' });
    },
  );

  it.each([
    [
      'embeddings (1536 dimensions)',
      '/embeddings',
      { model: 'svc-embed', input: 'x [[sim: latency_ms=400]]' },
    ],
    [
      'long chat completion',
      '/chat/completions',
      body({
        max_tokens: 6000,
        messages: [{ role: 'user', content: 'x [[sim: latency_ms=400 completion_tokens=6000]]' }],
      }),
    ],
  ])('settles a non-stream %s whose reply (over 16 KiB) finds its client gone', async (_, path, payload) => {
    await abandoned(path, payload);
    // The upstream answered after the hang-up; the invocation still ends and its record is sent.
    const [record] = await takeSettlements(t.stack, 1);
    expect(record?.outcome).toMatch(/^(success|client_aborted)$/);
    expect(record?.cost).toBeGreaterThan(0);
  });

  it('settles a stream whose client leaves during a long upstream pause at once, as abandoned and charged', async () => {
    const { reader, leave } = await readableStream('x [[sim: chunk_delay_ms=8000]]');
    await reader.read(); // the first event; the next is 8 s away
    const left = Date.now();
    leave();
    const [record] = await takeSettlements(t.stack, 1, 4_000);
    // Known at the hang-up, not when the upstream next spoke (8 s) or its idle timeout (60 s) ran out.
    expect(Date.now() - left).toBeLessThan(4_000);
    expect(record).toMatchObject({ outcome: 'client_aborted', fault: { kind: 'client' } });
    expect(record?.cost).toBeGreaterThan(0);
  });

  it('counts tool calls, and not the empty opening delta, when the upstream reports no usage', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];
    const ask = (stream: boolean) =>
      t.post(
        '/chat/completions',
        body({
          stream,
          tools,
          tool_choice: 'required',
          messages: [{ role: 'user', content: 'weather? [[sim: omit_usage=1]]' }],
        }),
      );
    const plainResponse = await ask(false);
    const plain = (await plainResponse.json()) as { usage: { completion_tokens: number } };
    const streamResponse = await ask(true);
    await streamResponse.text();
    const text = await t.post(
      '/chat/completions',
      body({
        stream: true,
        messages: [{ role: 'user', content: 'hi [[sim: omit_usage=1 completion_tokens=5]]' }],
      }),
    );
    await text.text();
    // By request id: records leave after each response has ended, in no order the queue promises.
    const [plainRecord, streamRecord, textRecord] = await takeSettlementsOf(
      t.stack,
      [plainResponse, streamResponse, text].map((r) => r.headers.get('x-request-id')),
    );
    expect(plain.usage.completion_tokens).toBeGreaterThan(0);
    expect(plainRecord?.usage?.completionTokens).toBe(plain.usage.completion_tokens);
    expect(streamRecord?.usage?.completionTokens).toBeGreaterThan(0);
    // Five words, five deltas: the role chunk's empty content is not a token.
    expect(textRecord?.usage).toMatchObject({ completionTokens: 5, source: 'estimated' });
  });

  it('shows the client the usage it is billed on when the upstream reports none', async () => {
    const content = 'hello [[sim: omit_usage=1 completion_tokens=5]]';
    const plain = await t.post('/chat/completions', body({ messages: [{ role: 'user', content }] }));
    const completion = (await plain.json()) as Record<string, unknown>;
    expect(schemaErrors('CreateChatCompletionResponse', completion)).toBe('');
    const streamed = await t.post(
      '/chat/completions',
      body({ messages: [{ role: 'user', content }], stream: true, stream_options: { include_usage: true } }),
    );
    const events = sseEvents(await streamed.text());
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((data) => JSON.parse(data) as Record<string, unknown>);
    for (const chunk of chunks) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
    const last = chunks.at(-1) as { id: string; choices: unknown[]; usage: unknown };
    expect(last.choices).toEqual([]);
    expect(last.id).toBe((chunks[0] as { id: string }).id);

    const [plainRecord, streamRecord] = await takeSettlementsOf(
      t.stack,
      [plain, streamed].map((r) => r.headers.get('x-request-id')),
    );
    for (const [shown, record] of [
      [completion.usage, plainRecord],
      [last.usage, streamRecord],
    ] as const) {
      expect(record?.usage?.source).toBe('estimated');
      expect(record?.cost).toBeGreaterThan(0);
      expect(shown).toMatchObject({
        prompt_tokens: record?.usage?.promptTokens,
        completion_tokens: record?.usage?.completionTokens,
        total_tokens: (record?.usage?.promptTokens ?? 0) + (record?.usage?.completionTokens ?? 0),
      });
    }
  });

  // The key is checked before the body (ADR 0010): an unknown key's call knows no account, a refused body's does.
  it.each([
    [
      'an unknown key',
      body(),
      { 'content-type': 'application/json', authorization: 'Bearer svc_live_nopeNOPEnope00000000' },
      401,
      'unauthenticated',
      null,
    ],
    ['a whitelist violation', body({ thinking: { budget: 1 } }), undefined, 400, 'client_error', 'acct_demo'],
  ] as const)(
    'is sent for %s too, with no charge',
    async (_, payload, headers, status, outcome, accountId) => {
      expect((await t.post('/chat/completions', payload, headers ? { ...headers } : undefined)).status).toBe(
        status,
      );
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({
        status,
        outcome,
        cost: 0,
        accountId,
        fault: { kind: 'client', status },
      });
    },
  );
});
