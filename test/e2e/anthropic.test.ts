import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { costOf } from '#core/pricing.ts';
import type { Deployment, Model } from '#core/registry.ts';
import type { Usage } from '#core/usage.ts';
import { countMessagesPromptTokens } from '#sim/messages.ts';
import { cachedTokensFor } from '#sim/prompt-cache.ts';
import { debitOf, fundedAccount, settledWallet } from '#test/billing.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { sseEvents } from '#test/sse.ts';
import { NO_CIRCUIT_BREAKING, startTestStack, type TestStack } from '#test/stack.ts';

const MODEL = 'famC-k3';
/** The catalog's prompt-caching model, to see cache reads billed at the cached rate. */
const CACHING_MODEL = 'famF3.8-27b';

let t: TestStack;

/** An Anthropic deployment at the simulator's `sim-c` provider, tried before the seeded sim-a and sim-b. */
const anthropicDeployment = (model: string): Deployment => ({
  id: `${model}@sim-c`,
  model,
  provider: 'sim-c',
  adapter: 'anthropic',
  baseUrl: `${t.simulator.url}/p/sim-c/v1`,
  upstreamModel: model,
  keyRefs: ['env:SIM_A_KEY_1', 'env:SIM_A_KEY_2'],
  priority: 0,
  weight: 1,
  status: 'active',
});

beforeAll(async () => {
  // Each test fails sim-c on purpose at most a few times; the circuit breaker must not learn across tests.
  t = await startTestStack({
    consumers: true,
    functionEnv: NO_CIRCUIT_BREAKING,
  });
  await t.stack.container.registryStore.put(
    [],
    [anthropicDeployment(MODEL), anthropicDeployment(CACHING_MODEL)],
  );
  await t.stack.container.registry.refresh();
});
afterAll(() => t?.stop());
afterEach(() => {
  t.simulator.resetFaults();
  t.simulator.clearCalls();
});

type Json = Record<string, unknown>;

const messages = [
  { role: 'system' as const, content: 'You are terse.' },
  { role: 'user' as const, content: 'Say something short.' },
];

/** The Messages request the gateway sent upstream (the simulator records it). */
const upstreamBody = (): Json => {
  const call = t.simulator.calls('sim-c').at(-1);
  expect(call?.path).toBe('/v1/messages');
  return call?.body as Json;
};

const publishedModel = async (id: string): Promise<Model> => {
  const model = (await t.stack.container.registry.catalog()).models.get(id);
  if (!model) throw new Error(`no model ${id}`);
  return model;
};

/** What the simulator reported, as core counts it: input + cache reads + cache writes, reads cached. */
const reportedUsage = (prompt: number, completion: number, cached = 0): Usage => ({
  promptTokens: prompt,
  completionTokens: completion,
  cachedPromptTokens: cached,
  reasoningTokens: 0,
  source: 'upstream',
});

describe('a chat model served by an anthropic deployment', () => {
  it('answers a non-stream call through the openai SDK with an OpenAI-shaped completion', async () => {
    const { data, response } = await t
      .openai()
      .chat.completions.create({ model: MODEL, messages, max_tokens: 200, temperature: 1.5, stop: ['zzz'] })
      .withResponse();
    expect(response.headers.get('x-svc-provider')).toBe('sim-c');
    expect(response.headers.get('x-svc-attempts')).toBe('1');
    expect(schemaErrors('CreateChatCompletionResponse', data)).toBe('');
    expect(data).toMatchObject({ object: 'chat.completion', model: MODEL });
    expect(data.choices[0]?.finish_reason).toBe('stop');
    const content = data.choices[0]?.message.content ?? '';
    expect(content.length).toBeGreaterThan(0);

    // The upstream got a Messages request, not a chat-completions one.
    const sent = upstreamBody();
    expect(sent).toEqual({
      model: MODEL,
      max_tokens: 200,
      system: 'You are terse.',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Say something short.' }] }],
      temperature: 1,
      stop_sequences: ['zzz'],
    });
    const call = t.simulator.calls('sim-c').at(-1);
    expect(call?.key).toMatch(/^sim-a-key-[12]$/);
    // Usage is the simulator's: its prompt count, one token per word of the reply.
    expect(data.usage).toEqual({
      prompt_tokens: countMessagesPromptTokens(sent),
      completion_tokens: content.split(' ').length,
      total_tokens: countMessagesPromptTokens(sent) + content.split(' ').length,
      prompt_tokens_details: { cached_tokens: 0 },
    });
  });

  it('streams through the openai SDK: schema-valid chunks, the same text, and the usage chunk', async () => {
    const whole = await t.openai().chat.completions.create({ model: MODEL, messages });
    const { data: stream, response } = await t
      .openai()
      .chat.completions.create({
        model: MODEL,
        messages,
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    expect(response.headers.get('x-svc-provider')).toBe('sim-c');
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    for (const chunk of chunks) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(
      whole.choices[0]?.message.content,
    );
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop');
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toEqual(whole.usage);
  });

  it('withholds the usage chunk from a client that did not ask, and still ends with [DONE]', async () => {
    const res = await t.post('/chat/completions', { model: MODEL, messages, stream: true });
    expect(res.status).toBe(200);
    const events = sseEvents(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Json);
    expect(chunks.length).toBeGreaterThan(1);
    for (const chunk of chunks) {
      expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
      expect(chunk).not.toHaveProperty('usage');
      expect(chunk.choices).toHaveLength(1);
    }
  });

  it('translates a forced tool call both ways, streamed and not', async () => {
    const tools = [
      {
        type: 'function' as const,
        function: { name: 'get_weather', parameters: { type: 'object', properties: {} } },
      },
    ];
    const request = { model: MODEL, messages, tools, tool_choice: 'required' as const };
    const completion = await t.openai().chat.completions.create(request);
    expect(schemaErrors('CreateChatCompletionResponse', completion)).toBe('');
    expect(completion.choices[0]?.finish_reason).toBe('tool_calls');
    const call = completion.choices[0]?.message.tool_calls?.[0];
    expect(call).toMatchObject({ type: 'function', function: { name: 'get_weather', arguments: '{}' } });
    expect(upstreamBody()).toMatchObject({
      tools: [{ name: 'get_weather', input_schema: { type: 'object', properties: {} } }],
      tool_choice: { type: 'any' },
    });

    const stream = await t.openai().chat.completions.create({ ...request, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    for (const chunk of chunks) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
    const deltas = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
    expect(deltas[0]).toMatchObject({ index: 0, id: call?.id, function: { name: 'get_weather' } });
    expect(deltas.map((d) => d.function?.arguments ?? '').join('')).toBe('{}');
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('tool_calls');
  });

  it('answers a conversation of earlier tool calls with no tools offered now, as OpenAI does', async () => {
    // An agent's last turn: the history holds a tool call and its result; no more tools are offered. Messages
    // refuses tool blocks without tool definitions (the simulator as the real API): it was a final 400.
    const history = [
      { role: 'user' as const, content: 'Weather in Paris?' },
      {
        role: 'assistant' as const,
        content: null,
        tool_calls: [
          { id: 'c1', type: 'function' as const, function: { name: 'get_weather', arguments: '{}' } },
        ],
      },
      { role: 'tool' as const, tool_call_id: 'c1', content: '18°C' },
      { role: 'user' as const, content: 'Summarise.' },
    ];
    const completion = await t.openai().chat.completions.create({ model: MODEL, messages: history });
    expect(completion.choices[0]?.finish_reason).toBe('stop');
    expect(completion.choices[0]?.message.content).toBeTruthy();
    expect(upstreamBody()).toMatchObject({
      tools: [{ name: 'get_weather', input_schema: { type: 'object' } }],
      tool_choice: { type: 'none' },
    });
  });

  it('sends a client’s top_p without the default temperature (newer Claude models refuse the two together)', async () => {
    await t.openai().chat.completions.create({ model: MODEL, messages, top_p: 0.5 });
    const sent = upstreamBody();
    expect(sent.top_p).toBe(0.5);
    expect(sent).not.toHaveProperty('temperature');
  });

  it('serves n > 1 from a deployment that can, without calling the Anthropic one', async () => {
    const { data: completion, response } = await t
      .openai()
      .chat.completions.create({ model: MODEL, messages, n: 2 })
      .withResponse();
    expect(completion.choices).toHaveLength(2);
    expect(t.simulator.calls('sim-c')).toHaveLength(0);
    expect(t.simulator.calls('sim-a')).toHaveLength(1);
    // The deployment that could not express it made no upstream call, so none is counted.
    expect(response.headers.get('x-svc-attempts')).toBe('1');
  });

  it('refuses n > 1 with a 400 naming n when only Anthropic deployments serve the model', async () => {
    const registry = t.stack.container.registryStore;
    const others = (await registry.load()).deployments.filter(
      (d) => d.model === MODEL && d.adapter !== 'anthropic',
    );
    await registry.put(
      [],
      others.map((d) => ({ ...d, status: 'retired' as const })),
    );
    await t.stack.container.registry.refresh();
    try {
      const error = await t
        .openai()
        .chat.completions.create({ model: MODEL, messages, n: 2 })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('n');
      expect(t.simulator.calls()).toHaveLength(0);
    } finally {
      await registry.put([], others);
      await t.stack.container.registry.refresh();
    }
  });
});

describe('a refusal of a request the language rule added a message to (svc-auto, spec §4 rule 2)', () => {
  it("names the client's message, not the one the list it saw had one more of", async () => {
    const registry = t.stack.container.registryStore;
    const others = (await registry.load()).deployments.filter((d) => d.model === 'svc-auto');
    await registry.put(
      [],
      [...others.map((d) => ({ ...d, status: 'retired' as const })), anthropicDeployment('svc-auto')],
    );
    await t.stack.container.registry.refresh();
    try {
      const history = [
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '[1]' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'Sunny' },
      ];
      const response = await t.post('/chat/completions', { model: 'svc-auto', messages: history });
      expect(response.status).toBe(400);
      const { error } = (await response.json()) as { error: { param: string; message: string } };
      expect(error.param).toBe('messages[1].tool_calls[0].function.arguments');
      expect(t.simulator.calls()).toHaveLength(0);
    } finally {
      await registry.put([], [...others, { ...anthropicDeployment('svc-auto'), status: 'retired' }]);
      await t.stack.container.registry.refresh();
    }
  });
});

describe('billing from the usage Anthropic reports', () => {
  it('debits the published rates × the simulator’s usage, streamed and not', async () => {
    const model = await publishedModel(MODEL);
    const { id, key } = await fundedAccount(t);
    const client = t.openai({ apiKey: key });
    const { data, response } = await client.chat.completions
      .create({ model: MODEL, messages })
      .withResponse();
    const whole = countMessagesPromptTokens(upstreamBody());
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Now stream something.' }],
      stream: true,
    });
    let streamedWords = '';
    for await (const chunk of stream) streamedWords += chunk.choices[0]?.delta.content ?? '';
    const streamedPrompt = countMessagesPromptTokens(upstreamBody());

    const wallet = await settledWallet(t, id);
    const nonStreamCost = costOf(
      model,
      reportedUsage(whole, (data.choices[0]?.message.content ?? '').split(' ').length),
    );
    expect(nonStreamCost).toBeGreaterThan(0);
    expect(debitOf(wallet, response.headers.get('x-request-id') as string)).toBe(nonStreamCost);
    const debits = wallet.ledger.filter((e) => e.kind === 'debit').map((e) => e.amount + e.owed);
    expect(debits).toHaveLength(2);
    expect(debits).toContain(costOf(model, reportedUsage(streamedPrompt, streamedWords.split(' ').length)));
  });

  it('bills cache reads at the cached rate and cache writes as input', async () => {
    const model = await publishedModel(CACHING_MODEL);
    expect(model.rates.cachedInput).toBeLessThan(model.rates.input);
    const { id, key } = await fundedAccount(t);
    const client = t.openai({ apiKey: key });
    const long = [{ role: 'user' as const, content: 'lorem ipsum dolor sit amet '.repeat(300) }];
    const first = await client.chat.completions
      .create({ model: CACHING_MODEL, messages: long })
      .withResponse();
    const prompt = countMessagesPromptTokens(upstreamBody());
    const cached = cachedTokensFor(prompt);
    expect(cached).toBeGreaterThan(0);
    const second = await client.chat.completions
      .create({ model: CACHING_MODEL, messages: long })
      .withResponse();
    // The first call wrote the cache (billed as input); the second read it.
    expect(first.data.usage).toMatchObject({
      prompt_tokens: prompt,
      prompt_tokens_details: { cached_tokens: 0 },
    });
    expect(second.data.usage).toMatchObject({
      prompt_tokens: prompt,
      prompt_tokens_details: { cached_tokens: cached },
    });

    const wallet = await settledWallet(t, id);
    const completion = second.data.usage?.completion_tokens ?? 0;
    const firstDebit = debitOf(wallet, first.response.headers.get('x-request-id') as string);
    const secondDebit = debitOf(wallet, second.response.headers.get('x-request-id') as string);
    expect(firstDebit).toBe(costOf(model, reportedUsage(prompt, completion)));
    expect(secondDebit).toBe(costOf(model, reportedUsage(prompt, completion, cached)));
    expect(secondDebit).toBeLessThan(firstDebit as number);
  });
});

describe('a stream Anthropic never finished reporting', () => {
  it('bills a client that leaves mid-stream the prompt as message_start counted it, cache reads at the cached rate', async () => {
    const model = await publishedModel(CACHING_MODEL);
    const { id, key } = await fundedAccount(t);
    const long = [
      {
        role: 'user' as const,
        content: `${'lorem ipsum dolor sit amet '.repeat(300)}[[sim: chunk_delay_ms=100 completion_tokens=30]]`,
      },
    ];
    // The first call writes the prompt cache; the streamed one reads it.
    await t.openai({ apiKey: key }).chat.completions.create({ model: CACHING_MODEL, messages: long });
    const prompt = countMessagesPromptTokens(upstreamBody());
    const cached = cachedTokensFor(prompt);
    expect(cached).toBeGreaterThan(prompt / 2);

    const controller = new AbortController();
    const response = await fetch(`${t.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: CACHING_MODEL, messages: long, stream: true }),
      signal: controller.signal,
    });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await reader.read();
    controller.abort();
    const requestId = response.headers.get('x-request-id') as string;

    const debit = debitOf(await settledWallet(t, id), requestId) as number;
    // Whatever our count of the output relayed (1 to 30 tokens), the prompt is Anthropic's: mostly cached.
    expect(debit).toBeGreaterThanOrEqual(costOf(model, reportedUsage(prompt, 1, cached)));
    expect(debit).toBeLessThanOrEqual(costOf(model, reportedUsage(prompt, 30, cached)));
    expect(debit).toBeLessThan(costOf(model, reportedUsage(prompt, 1)));
  });
});

describe('faults of the anthropic deployment', () => {
  it('falls back to the openai-compatible deployment when Anthropic is overloaded (529), non-stream', async () => {
    t.simulator.setFaults('sim-c', { error: 'overloaded' });
    const { data, response } = await t
      .openai()
      .chat.completions.create({ model: MODEL, messages })
      .withResponse();
    expect(response.headers.get('x-svc-provider')).toBe('sim-a');
    expect(schemaErrors('CreateChatCompletionResponse', data)).toBe('');
    // 529 is an upstream-reported fault: both of sim-c's keys were tried before moving on.
    expect(t.simulator.calls('sim-c').map((c) => c.fault)).toEqual(['overloaded', 'overloaded']);
    expect(response.headers.get('x-svc-attempts')).toBe('3');
  });

  it('falls back when Anthropic is overloaded (529) on a stream, without a client error', async () => {
    t.simulator.setFaults('sim-c', { error: 'overloaded' });
    const res = await t.post('/chat/completions', { model: MODEL, messages, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-svc-provider')).toBe('sim-a');
    expect(sseEvents(await res.text()).at(-1)).toBe('[DONE]');
    expect(t.simulator.calls('sim-c')).toHaveLength(1);
  });

  it('falls back when Anthropic reports an overload in the stream after message_start, before any content', async () => {
    // message_start, then Anthropic's in-stream `error` (overloaded_error): nothing has reached the client yet.
    t.simulator.setFaults('sim-c', { error: 'error_mid', dropAfterChunks: 1 });
    const res = await t.post('/chat/completions', { model: MODEL, messages, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-svc-provider')).toBe('sim-a');
    const events = sseEvents(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    for (const event of events.slice(0, -1)) expect(JSON.parse(event)).not.toHaveProperty('error');
    expect(t.simulator.calls('sim-c').map((c) => c.fault)).toEqual(['error_mid']);
  });

  it('falls back when the Anthropic stream drops before its first event', async () => {
    t.simulator.setFaults('sim-c', { error: 'drop_mid', dropAfterChunks: 0 });
    const res = await t.post('/chat/completions', { model: MODEL, messages, stream: true });
    expect(res.headers.get('x-svc-provider')).toBe('sim-a');
    expect(sseEvents(await res.text()).at(-1)).toBe('[DONE]');
    expect(t.simulator.calls('sim-c').map((c) => c.fault)).toEqual(['drop_mid']);
  });

  it('cycles to the deployment’s other key when Anthropic refuses one (401)', async () => {
    t.simulator.setFaults('sim-c', { error: 'unauthorized', keys: ['sim-a-key-1'] });
    const refused = () =>
      t.simulator.calls('sim-c').some((c) => c.key === 'sim-a-key-1' && c.fault === 'unauthorized');
    // Each call starts at a random key, so call until one has started at the refused key (a call starting at
    // the good one never cycles); 30 calls all missing it would be a 1-in-2³⁰ fluke.
    let served = 0;
    while (served < 30 && (served < 4 || !refused())) {
      const res = await t.post('/chat/completions', { model: MODEL, messages });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-svc-provider')).toBe('sim-c');
      served++;
    }
    expect(refused()).toBe(true);
    // Every call was served by the other key, including those that were refused first.
    expect(t.simulator.calls('sim-c').filter((c) => c.key === 'sim-a-key-2')).toHaveLength(served);
  });

  it.each(['drop_mid', 'error_mid'] as const)(
    'ends a stream that breaks (%s) after the first byte with an explicit error event',
    async (error) => {
      // message_start, content_block_start, ping, one delta: two chunks reach the client, then the drop (or an
      // error event).
      t.simulator.setFaults('sim-c', { error, dropAfterChunks: 4 });
      const res = await t.post('/chat/completions', { model: MODEL, messages, stream: true });
      expect(res.status).toBe(200);
      const events = sseEvents(await res.text());
      expect(events).not.toContain('[DONE]');
      expect(events).toHaveLength(3);
      expect(JSON.parse(events.at(-1) as string)).toMatchObject({
        error: { type: 'server_error', code: 'stream_interrupted' },
      });
      expect(t.simulator.calls('sim-a')).toHaveLength(0);
    },
  );

  it.each(['drop_mid', 'error_mid'] as const)(
    'ends a stream cut by %s after its message_delta as whole, and bills it: the client has the entire reply',
    async (error) => {
      const model = await publishedModel(MODEL);
      const { id, key } = await fundedAccount(t);
      // message_start, content_block_start, ping, three deltas, content_block_stop, message_delta: then the drop (or
      // an error event), before message_stop.
      t.simulator.setFaults('sim-c', { error, dropAfterChunks: 8 });
      const sent = [{ role: 'user' as const, content: 'Three words. [[sim: completion_tokens=3]]' }];
      const res = await t.post(
        '/chat/completions',
        { model: MODEL, messages: sent, stream: true, stream_options: { include_usage: true } },
        { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      );
      expect(res.status).toBe(200);
      const events = sseEvents(await res.text());
      expect(events.at(-1)).toBe('[DONE]');
      const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Json);
      expect(chunks.some((c) => (c.choices as Json[])[0]?.finish_reason === 'stop')).toBe(true);
      const prompt = countMessagesPromptTokens(upstreamBody());
      expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 3 });
      expect(t.simulator.calls('sim-c').map((c) => c.fault)).toEqual([error]);
      const wallet = await settledWallet(t, id);
      expect(debitOf(wallet, res.headers.get('x-request-id') as string)).toBe(
        costOf(model, reportedUsage(prompt, 3)),
      );
    },
  );
});
