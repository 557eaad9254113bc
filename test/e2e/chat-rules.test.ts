import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { DeleteItemCommand, DynamoDBClient, ScanCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DynamoRegistry } from '#adapters/dynamo-registry.ts';
import { LANGUAGE_SYSTEM_MESSAGE } from '#core/chat.ts';
import { localClientConfig } from '#local/emulators.ts';
import { sseEvents } from '#test/sse.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack();
});
afterAll(() => t?.stop());
afterEach(() => t.simulator.clearCalls());

type Json = Record<string, unknown>;
const upstreamBody = (): Json => t.simulator.calls().at(-1)?.body as Json;
const chat = (model: string, extra: Json = {}) =>
  t.post('/chat/completions', { model, messages: [{ role: 'user', content: 'Bonjour' }], ...extra });

describe('spec §4 rule 2: svc-auto and svc-auto-pro answer in the user’s language', () => {
  it.each(['svc-auto', 'svc-auto-pro'])(
    '%s gets the language system message when none was sent',
    async (model) => {
      expect((await chat(model)).status).toBe(200);
      expect((upstreamBody().messages as Json[])[0]).toEqual({
        role: 'system',
        content: LANGUAGE_SYSTEM_MESSAGE,
      });
    },
  );

  it('keeps the client’s own system message as it is', async () => {
    const messages = [
      { role: 'system', content: 'Answer in Swahili.' },
      { role: 'user', content: 'Hello' },
    ];
    await t.post('/chat/completions', { model: 'svc-auto', messages });
    expect(upstreamBody().messages).toEqual(messages);
  });

  it('does not touch other models', async () => {
    await chat('famA-v4.1-flash');
    expect(upstreamBody().messages).toEqual([{ role: 'user', content: 'Bonjour' }]);
  });
});

describe("LangChain's body (ChatOpenAI with max_tokens=10 sends max_completion_tokens)", () => {
  it('is served with that cap, sent upstream as max_tokens and held to it', async () => {
    const res = await chat('famA-v4.1-flash', {
      n: 1,
      temperature: 0.7,
      stream: false,
      max_completion_tokens: 10,
    });
    expect(res.status).toBe(200);
    expect(upstreamBody().max_tokens).toBe(10);
    expect(upstreamBody()).not.toHaveProperty('max_completion_tokens');
    const body = (await res.json()) as { usage: { completion_tokens: number } };
    expect(body.usage.completion_tokens).toBeLessThanOrEqual(10);
  });
});

describe('spec §4 rule 1: reasoning only through a reasoning-tier model', () => {
  it('turns reasoning on upstream for svc-famF-max, and bills its reasoning tokens', async () => {
    const res = await chat('svc-famF-max');
    expect(upstreamBody().reasoning_effort).toBe('medium');
    const usage = (
      (await res.json()) as { usage: { completion_tokens_details?: { reasoning_tokens: number } } }
    ).usage;
    expect(usage.completion_tokens_details?.reasoning_tokens).toBe(16);
  });

  it('never sends reasoning parameters for other models, and refuses them from clients', async () => {
    await chat('famC-k3');
    expect(upstreamBody()).not.toHaveProperty('reasoning_effort');
    const refused = await chat('svc-famF-max', { reasoning_effort: 'high' });
    expect(refused.status).toBe(400);
  });
});

describe('what goes upstream', () => {
  it('sends temperature 0.7 when the client gives none, and a completion cap always', async () => {
    await chat('famA-v4.1-flash');
    expect(upstreamBody()).toMatchObject({ temperature: 0.7, max_tokens: 4096, model: 'famA-v4.1-flash' });
  });

  it('forces include_usage on upstream streams (rule 4), and withholds the usage chunk from the client', async () => {
    const res = await chat('famA-v4.1-flash', { stream: true });
    expect(res.status).toBe(200);
    expect(upstreamBody().stream_options).toEqual({ include_usage: true });
    const events = sseEvents(await res.text());
    // A whole stream, its text and [DONE] included — only the usage chunk left out.
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.some((e) => /"content":"[^"]/.test(e))).toBe(true);
    expect(events.some((e) => e.includes('"usage"'))).toBe(false);
  });
});

describe('content and tools', () => {
  const image = { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } };

  it('accepts images only on multimodal models', async () => {
    const messages = [{ role: 'user', content: [{ type: 'text', text: 'what is this?' }, image] }];
    expect((await t.post('/chat/completions', { model: 'famF3.8-27b', messages })).status).toBe(200);
    const refused = await t.post('/chat/completions', { model: 'famA-v4.1-flash', messages });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { param: string } }).error.param).toBe(
      'messages[0].content[1]',
    );
  });

  it('round-trips a tool call and its result', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];
    const first = (await (
      await t.post('/chat/completions', {
        model: 'famA-v4.1-flash',
        messages: [{ role: 'user', content: 'weather?' }],
        tools,
        tool_choice: 'required',
      })
    ).json()) as { choices: { message: Json; finish_reason: string }[] };
    expect(first.choices[0]?.finish_reason).toBe('tool_calls');
    const call = (first.choices[0]?.message.tool_calls as { id: string }[] | undefined)?.[0];
    /** The conversation so far, answered with a tool result for `toolCallId`. */
    const answer = (toolCallId: string | undefined) =>
      t.post('/chat/completions', {
        model: 'famA-v4.1-flash',
        tools,
        messages: [
          { role: 'user', content: 'weather?' },
          first.choices[0]?.message,
          { role: 'tool', tool_call_id: toolCallId, content: '{"sky":"clear"}' },
        ],
      });
    expect((await answer(call?.id)).status).toBe(200);
    // The same history with the tool result's id mistyped: refused by us, never sent upstream.
    t.simulator.clearCalls();
    const mistyped = await answer(`${call?.id}x`);
    expect(mistyped.status).toBe(400);
    expect(((await mistyped.json()) as { error: { param: string } }).error.param).toBe(
      'messages[2].tool_call_id',
    );
    expect(t.simulator.calls()).toHaveLength(0);
  });

  it('passes prompt-cache usage through for prompt-caching models', async () => {
    const long = 'the quick brown fox jumps over the lazy dog '.repeat(200);
    const send = async () =>
      (await (
        await t.post('/chat/completions', {
          model: 'famF3.8-27b',
          messages: [{ role: 'user', content: long }],
        })
      ).json()) as {
        usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } };
      };
    expect((await send()).usage.prompt_tokens_details.cached_tokens).toBe(0);
    const second = await send();
    expect(second.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(1000);
    expect(second.usage.prompt_tokens_details.cached_tokens).toBeLessThanOrEqual(second.usage.prompt_tokens);
  });
});

describe('request hygiene', () => {
  it('refuses a body over 4 MiB with 413 before parsing it', async () => {
    const res = await chat('famA-v4.1-flash', {
      messages: [{ role: 'user', content: 'x'.repeat(4 * 1024 * 1024) }],
    });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('request_too_large');
    expect(t.simulator.calls()).toHaveLength(0);
  });

  it('refuses malformed JSON and non-JSON content types with 400', async () => {
    const bad = await t.post('/chat/completions', '{"model":');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('invalid_json');
    const form = await t.post('/chat/completions', 'model=x', {
      authorization: `Bearer ${t.apiKey}`,
      'content-type': 'application/x-www-form-urlencoded',
    });
    expect(form.status).toBe(400);
  });

  it('reads a body compressed with gzip, deflate or br, as its Content-Encoding says', async () => {
    const body = Buffer.from(
      JSON.stringify({ model: 'famA-v4.1-flash', messages: [{ role: 'user', content: 'Compressed hello' }] }),
    );
    for (const [encoding, compress] of [
      ['gzip', gzipSync],
      ['deflate', deflateSync],
      ['br', brotliCompressSync],
    ] as const) {
      const res = await t.post('/chat/completions', compress(body), {
        authorization: `Bearer ${t.apiKey}`,
        'content-type': 'application/json',
        'content-encoding': encoding,
      });
      expect(res.status, encoding).toBe(200);
      expect((upstreamBody().messages as Json[])[0]).toEqual({ role: 'user', content: 'Compressed hello' });
    }
  });

  it('refuses a body it cannot decompress, or that decompresses past the limit, before any upstream call', async () => {
    const send = (body: Buffer, encoding: string) =>
      t.post('/chat/completions', body, {
        authorization: `Bearer ${t.apiKey}`,
        'content-type': 'application/json',
        'content-encoding': encoding,
      });
    const errorOf = async (res: Response) => ({
      status: res.status,
      code: ((await res.json()) as { error: { code: string } }).error.code,
    });
    const json = Buffer.from('{"model":"famA-v4.1-flash","messages":[{"role":"user","content":"hi"}]}');
    expect(await errorOf(await send(json, 'zstd'))).toEqual({
      status: 400,
      code: 'unsupported_content_encoding',
    });
    // Plain JSON labelled gzip: the label is wrong, and the body is not guessed at.
    expect(await errorOf(await send(json, 'gzip'))).toEqual({
      status: 400,
      code: 'invalid_content_encoding',
    });
    // ~8 KB on the wire, 8 MiB once inflated: the 4 MiB limit holds for what the body decompresses to.
    const bomb = gzipSync(Buffer.alloc(8 * 1024 * 1024, ' '));
    expect(bomb.length).toBeLessThan(64 * 1024);
    expect(await errorOf(await send(bomb, 'gzip'))).toEqual({ status: 413, code: 'request_too_large' });
    expect(t.simulator.calls()).toHaveLength(0);
  });

  it('names the serving provider and model in the response headers', async () => {
    const res = await chat('famA-v4.1-flash');
    expect(res.headers.get('x-svc-provider')).toBe('sim-a');
    expect(res.headers.get('x-svc-served-model')).toBe('famA-v4.1-flash');
    expect(res.headers.get('x-svc-attempts')).toBe('1');
  });
});

describe('503 when nothing can serve', () => {
  const dynamo = () => new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));

  it('answers 503 no_eligible_model for a model without deployments', async () => {
    const registry = new DynamoRegistry(dynamo(), t.stack.resources.tables.registry);
    await registry.put(
      [
        {
          id: 'famZ-orphan',
          family: 'famZ',
          kind: 'chat',
          contextWindow: 8192,
          rates: { input: 1, output: 1 },
          flags: {},
          status: 'active',
          created: 0,
        },
      ],
      [],
    );
    await t.stack.container.registry.refresh();
    const res = await chat('famZ-orphan');
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string; type: string } }).error).toMatchObject({
      code: 'no_eligible_model',
      type: 'service_unavailable',
    });
  });

  it('answers 503 when the registry reads as empty', async () => {
    const client = dynamo();
    const table = t.stack.resources.tables.registry;
    const { Items = [] } = await client.send(new ScanCommand({ TableName: table }));
    await Promise.all(
      Items.map((item) =>
        client.send(
          new DeleteItemCommand({ TableName: table, Key: { pk: item.pk as never, sk: item.sk as never } }),
        ),
      ),
    );
    await t.stack.container.registry.refresh();
    const res = await chat('famA-v4.1-flash');
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('no_eligible_model');
  });
});
