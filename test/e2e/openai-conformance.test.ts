import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { sseEvents } from '#test/sse.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack();
});
afterAll(() => t?.stop());

const user = (content: string) => [{ role: 'user', content }];
const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } },
];

/** Bodies exercising every response shape: text, n > 1, tool calls, JSON mode. */
const variants: [string, Record<string, unknown>][] = [
  ['plain text', { model: 'famA-v4.1-flash', messages: user('hi') }],
  ['two choices', { model: 'famB-5.3', messages: user('hi'), n: 2 }],
  [
    'as many choices as OpenAI allows',
    { model: 'famA-v4.1-flash', messages: user('hi'), n: 128, max_tokens: 4 },
  ],
  ['a tool call', { model: 'famE-v2.6-pro', messages: user('weather?'), tools, tool_choice: 'required' }],
  ['JSON mode', { model: 'svc-pro-20b', messages: user('hi'), response_format: { type: 'json_object' } }],
  ['a reasoning model', { model: 'svc-famF-max', messages: user('think') }],
];

describe('responses validate against OpenAI’s published schemas', () => {
  it.each(variants)('non-stream: %s', async (_, body) => {
    const res = await t.post('/chat/completions', body);
    expect(res.status).toBe(200);
    expect(schemaErrors('CreateChatCompletionResponse', await res.json())).toBe('');
  });

  it.each(variants)('stream chunks, with and without usage: %s', async (_, body) => {
    for (const stream_options of [undefined, { include_usage: true }]) {
      const res = await t.post('/chat/completions', {
        ...body,
        stream: true,
        ...(stream_options ? { stream_options } : {}),
      });
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const events = sseEvents(await res.text());
      expect(events.at(-1)).toBe('[DONE]');
      for (const data of events.slice(0, -1))
        expect(schemaErrors('CreateChatCompletionStreamResponse', JSON.parse(data))).toBe('');
    }
  });
});

describe('n > 1', () => {
  it('returns every choice asked for, each once, streamed or not', async () => {
    const body = { model: 'famA-v4.1-flash', messages: user('hi'), n: 128, max_tokens: 4 };
    const whole = (await (await t.post('/chat/completions', body)).json()) as {
      choices: { index: number }[];
    };
    expect(whole.choices.map((c) => c.index)).toEqual([...Array(128).keys()]);
    const events = sseEvents(await (await t.post('/chat/completions', { ...body, stream: true })).text());
    const finished = new Set<number>();
    for (const data of events.slice(0, -1)) {
      for (const choice of (
        JSON.parse(data) as { choices: { index: number; finish_reason: string | null }[] }
      ).choices)
        if (choice.finish_reason !== null) finished.add(choice.index);
    }
    expect(finished.size).toBe(128);
  });
});

describe('error bodies validate against ErrorResponse and carry x-request-id', () => {
  const cases: [number, () => Promise<Response>][] = [
    [
      400,
      () => t.post('/chat/completions', { model: 'famA-v4.1-flash', messages: user('x'), thinking: true }),
    ],
    [400, () => t.post('/chat/completions', '{not json')],
    [
      401,
      () =>
        t.post(
          '/chat/completions',
          { model: 'famA-v4.1-flash', messages: user('x') },
          { 'content-type': 'application/json' },
        ),
    ],
    [404, () => t.post('/chat/completions', { model: 'no-such-model', messages: user('x') })],
    [404, () => t.post('/no/such/path', {})],
    [
      413,
      () =>
        t.post('/chat/completions', {
          model: 'famA-v4.1-flash',
          messages: user('x'.repeat(5 * 1024 * 1024)),
        }),
    ],
  ];

  it.each(cases)('%i', async (status, send) => {
    const res = await send();
    expect(res.status).toBe(status);
    expect(res.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
    expect(schemaErrors('ErrorResponse', await res.json())).toBe('');
  });

  it('429 and 500 from exhausted fallbacks', async () => {
    for (const [error, status] of [
      ['overloaded', 429],
      ['server_error', 500],
    ] as const) {
      t.simulator.setFaults('sim-a', { error });
      t.simulator.setFaults('sim-b', { error });
      const res = await t.post('/chat/completions', { model: 'famA-v4.1-flash', messages: user('x') });
      t.simulator.resetFaults();
      expect(res.status).toBe(status);
      expect(schemaErrors('ErrorResponse', await res.json())).toBe('');
    }
  });

  it('gives every response its own request id', async () => {
    const ids = new Set<string | null>();
    for (let i = 0; i < 3; i++) {
      ids.add(
        (await t.post('/chat/completions', { model: 'famA-v4.1-flash', messages: user('x') })).headers.get(
          'x-request-id',
        ),
      );
    }
    expect(ids.size).toBe(3);
  });
});
