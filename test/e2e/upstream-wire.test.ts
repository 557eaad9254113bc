import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { sseEvents } from '#test/sse.ts';
import {
  drainSettlements,
  NO_CIRCUIT_BREAKING,
  startTestStack,
  type TestStack,
  takeSettlements,
} from '#test/stack.ts';

/**
 * OpenAI-compatible upstreams do not all write their streams the way OpenAI does. A stand-in upstream writes
 * legal variants — JSON with spaces after colons (Python's json.dumps), one event over several `data:` lines,
 * a stream that ends after its last chunk without `[DONE]` — and the client must get the same stream from us
 * as from a compact one: relabelled, framed, whole, and billed.
 */

const HIDDEN = 'hidden-upstream-model';
/** The stack's stream first-byte timeout: short, for an upstream that only ever sends keep-alives. */
const FIRST_BYTE_MS = 2_000;
const UPSTREAM_KEY = '3f2a9c1e-7b4d-4e8a-9f01-2c3d4e5f6a7b';
const MODEL = 'famA-v4.1-flash';

let t: TestStack;
let upstream: Server;

/** The chunks of a two-word reply with its usage, as an upstream builds them. */
const chunks = () => {
  const base = { id: 'chatcmpl-wire', object: 'chat.completion.chunk', created: 1, model: HIDDEN };
  const choice = (delta: object, finish: string | null = null) => ({
    ...base,
    choices: [{ index: 0, delta, finish_reason: finish }],
    usage: null,
  });
  return [
    choice({ role: 'assistant', content: '' }),
    choice({ content: 'Hello' }),
    choice({ content: ' there' }),
    choice({}, 'stop'),
    { ...base, choices: [], usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } },
  ];
};

const MODES: Readonly<Record<string, (chunk: object) => string>> = {
  spaced: (chunk) => `data: ${JSON.stringify(chunk, null, 1).replaceAll('\n', ' ')}\n\n`,
  multiline: (chunk) =>
    `${JSON.stringify(chunk, null, 2)
      .split('\n')
      .map((line) => `data: ${line}`)
      .join('\n')}\n\n`,
  'no-done': (chunk) => `data: ${JSON.stringify(chunk)}\n\n`,
  // OpenAI names the dated snapshot it served, not the alias it was asked for (gpt-4o-mini-2024-07-18).
  dated: (chunk) =>
    `data: ${JSON.stringify(chunk).replace(`"model":"${HIDDEN}"`, `"model":"${HIDDEN}-2024-08-06"`)}\n\n`,
  // A space before each colon too.
  'space-before-colon': (chunk) => `data: ${JSON.stringify(chunk).replaceAll('":', '" :')}\n\n`,
  // The role and the first text in one chunk: no opening chunk of its own.
  'text-first': (chunk) => {
    const delta = deltaOf(chunk);
    if (delta?.content === 'Hello') return '';
    if (delta?.role)
      return `data: ${JSON.stringify(withDelta(chunk, { role: 'assistant', content: 'Hello' }))}\n\n`;
    return `data: ${JSON.stringify(chunk)}\n\n`;
  },
  // No role at all: the text from the first chunk on.
  'no-role': (chunk) => (deltaOf(chunk)?.role ? '' : `data: ${JSON.stringify(chunk)}\n\n`),
};

type Choice = { delta: Record<string, unknown> };
const deltaOf = (chunk: object) => (chunk as { choices: Choice[] }).choices[0]?.delta;
const withDelta = (chunk: object, delta: object) => ({
  ...chunk,
  choices: (chunk as { choices: Choice[] }).choices.map((c) => ({ ...c, delta })),
});

const line = (chunk: object) => `data: ${JSON.stringify(chunk)}\n\n`;

/**
 * A two-choice reply (n = 2) whose second choice first appears after the stream's first chunk, with its role and
 * first text together; the first choice opens itself, as OpenAI does.
 */
const twoChoices = () => {
  const base = { id: 'chatcmpl-two', object: 'chat.completion.chunk', created: 2, model: HIDDEN };
  const at = (index: number, delta: object, finish: string | null = null) => ({
    ...base,
    choices: [{ index, delta, finish_reason: finish }],
    usage: null,
  });
  return [
    at(0, { role: 'assistant', content: '' }),
    at(0, { content: 'A' }),
    at(1, { role: 'assistant', content: 'B' }),
    at(0, {}, 'stop'),
    at(1, {}, 'stop'),
    { ...base, choices: [], usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } },
  ];
};

/** Upstreams that break the protocol around a reply, each its own way. */
const FAULTY: Readonly<Record<string, (res: ServerResponse) => void>> = {
  // The whole reply, usage included, then the connection reset instead of [DONE] and a clean end.
  'reset-after-reply': (res) => {
    for (const chunk of chunks()) res.write(line(chunk));
    setTimeout(() => res.socket?.destroy(), 20);
  },
  // [DONE] before the reply finished, then the rest of it.
  'early-done': (res) => {
    const [role, hello, there, stop, usage] = chunks() as object[];
    for (const chunk of [role, hello] as object[]) res.write(line(chunk));
    res.write('data: [DONE]\n\n');
    for (const chunk of [there, stop, usage] as object[]) res.write(line(chunk));
    res.end('data: [DONE]\n\n');
  },
  // An event that is not JSON among good ones.
  'not-json': (res) => {
    const [role, hello, there, stop, usage] = chunks() as object[];
    for (const chunk of [role, hello] as object[]) res.write(line(chunk));
    res.write('data: {"not json\n\n');
    for (const chunk of [there, stop, usage] as object[]) res.write(line(chunk));
    res.end('data: [DONE]\n\n');
  },
  // Groq's way: its own usage nested in the finish chunk (`x_groq.usage`), then the standard usage-only chunk.
  groq: (res) => {
    const [role, hello, there, stop, usage] = chunks() as Record<string, unknown>[];
    const groqStop = {
      ...stop,
      x_groq: { id: 'req_groq', usage: { prompt_tokens: 99, completion_tokens: 99 } },
    };
    for (const chunk of [role, hello, there, groqStop, usage] as object[]) res.write(line(chunk));
    res.end('data: [DONE]\n\n');
  },
  // A running total of usage on every chunk (GLM, Perplexity), and the connection reset mid-reply.
  'running-usage-reset': (res) => {
    const [role, hello] = chunks() as Record<string, unknown>[];
    const running = { prompt_tokens: 7, completion_tokens: 1, total_tokens: 8 };
    for (const chunk of [role, hello] as object[]) res.write(line({ ...chunk, usage: running }));
    setTimeout(() => res.socket?.destroy(), 20);
  },
  // `"finish_reason": ""` rather than null before the finish, and the connection reset mid-reply.
  'empty-finish-reset': (res) => {
    const [role, hello] = chunks() as { choices: Record<string, unknown>[] }[];
    for (const chunk of [role, hello] as { choices: Record<string, unknown>[] }[])
      res.write(line({ ...chunk, choices: chunk.choices.map((c) => ({ ...c, finish_reason: '' })) }));
    setTimeout(() => res.socket?.destroy(), 20);
  },
  // A keep-alive line that is no chunk, before the first one.
  'ping-first': (res) => {
    res.write('data: ping\n\n');
    for (const chunk of chunks()) res.write(line(chunk));
    res.end('data: [DONE]\n\n');
  },
  // A first event that is a JSON object but no chunk (neither choices nor usage), then the reply.
  'object-first': (res) => {
    res.write(line({ id: 'chatcmpl-wire', object: 'chat.completion.chunk', created: 1, model: HIDDEN }));
    for (const chunk of chunks()) res.write(line(chunk));
    res.end('data: [DONE]\n\n');
  },
  // Empty keep-alive objects and nothing else, until well past the first-byte timeout.
  'only-keep-alives': (res) => {
    const timer = setInterval(() => res.write('data: {}\n\n'), 100);
    setTimeout(() => {
      clearInterval(timer);
      res.end();
    }, FIRST_BYTE_MS * 3);
    res.on('close', () => clearInterval(timer));
  },
  // Empty keep-alive objects among the chunks.
  'keep-alive': (res) => {
    for (const chunk of chunks()) res.write(`data: {}\n\n${line(chunk)}`);
    res.end('data: [DONE]\n\n');
  },
  // Legal JSON with spaces around it.
  padded: (res) => {
    for (const chunk of chunks()) res.write(`data:  ${JSON.stringify(chunk)} \n\n`);
    res.end('data: [DONE]\n\n');
  },
  // The whole reply, usage included, then an error event (and no [DONE]).
  'error-after-whole': (res) => {
    for (const chunk of chunks()) res.write(line(chunk));
    res.end(line({ error: { message: 'internal error', type: 'server_error', param: null, code: null } }));
  },
  // Every choice finished (no usage yet), then an event that is not JSON.
  'finish-then-garbage': (res) => {
    const [role, hello, there, stop] = chunks() as object[];
    for (const chunk of [role, hello, there, stop] as object[]) res.write(line(chunk));
    res.end('data: {"not json\n\n');
  },
  // A usage report on the first chunk (nothing generated yet), none after the text: no usage-only chunk.
  'early-usage': (res) => {
    const [role, hello, there, stop] = chunks() as Record<string, unknown>[];
    const early = { ...role, usage: { prompt_tokens: 7, completion_tokens: 0, total_tokens: 7 } };
    for (const chunk of [early, hello, there, stop] as object[]) res.write(line(chunk));
    res.end('data: [DONE]\n\n');
  },
  // The usage chunk twice.
  'two-usage': (res) => {
    const all = chunks();
    for (const chunk of [...all, all.at(-1) as object]) res.write(line(chunk));
    res.end('data: [DONE]\n\n');
  },
};

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk: Buffer) => {
      raw += chunk.toString();
    });
    req.on('end', () => {
      if (req.url?.endsWith('/audio/speech')) {
        // A provider (or a proxy before it) answering 200 with a document instead of audio.
        const { input } = JSON.parse(raw) as { input: string };
        const json = input.includes('mode=speech-json');
        res.writeHead(200, { 'content-type': json ? 'application/json' : 'text/html; charset=utf-8' });
        return void res.end(json ? '{"error":{"message":"quota exceeded"}}' : '<html>Bad gateway</html>');
      }
      const body = JSON.parse(raw) as { messages: { content: string }[]; stream?: boolean };
      if (body.messages.some((msg) => msg.content.includes('mode=echo-key'))) {
        // A verbose provider quoting the key it was sent, in a format no rule recognises (a UUID).
        const key = (req.headers.authorization ?? '').replace(/^Bearer /, '');
        res.writeHead(400, { 'content-type': 'application/json' });
        const message = `Invalid value for 'messages' with key=${key} (first 8: ${key.slice(0, 8)}…)`;
        return void res.end(
          JSON.stringify({ error: { message, type: 'invalid_request_error', code: 'invalid_value' } }),
        );
      }
      const busy = /mode=busy-(\w+)/.exec(body.messages.map((msg) => msg.content).join(' '))?.[1];
      if (busy) {
        // A provider that is busy and says when to come back: in seconds, or in OpenAI's precise header.
        const hint =
          busy === 'ms' ? { 'retry-after-ms': '2500', 'retry-after': '3' } : { 'retry-after': '7' };
        res.writeHead(429, { 'content-type': 'application/json', ...hint });
        const error = {
          message: 'Rate limit reached for requests',
          type: 'requests',
          code: 'rate_limit_exceeded',
        };
        return void res.end(JSON.stringify({ error }));
      }
      if (body.messages.some((msg) => msg.content.includes('mode=huge-usage'))) {
        // A provider reporting far more completion than the cap it was sent allows (16 here).
        const usage = { prompt_tokens: 7, completion_tokens: 5_000_000, total_tokens: 5_000_007 };
        const [role, hello, , stop] = chunks() as Record<string, unknown>[];
        if (body.stream === false) {
          res.writeHead(200, { 'content-type': 'application/json' });
          return void res.end(
            JSON.stringify({
              id: 'chatcmpl-huge',
              object: 'chat.completion',
              created: 1,
              model: HIDDEN,
              choices: [
                { index: 0, message: { role: 'assistant', content: 'Hello' }, finish_reason: 'stop' },
              ],
              usage,
            }),
          );
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (const chunk of [role, hello, stop, { ...hello, choices: [], usage }])
          res.write(`data: ${JSON.stringify(chunk)}\n\n`);
        res.end('data: [DONE]\n\n');
        return;
      }
      if (body.messages.some((msg) => msg.content.includes('mode=aggregator-error'))) {
        // An aggregator's failure (OpenRouter's form): a chunk with a top-level error and finish_reason "error",
        // then the usage and [DONE] as if the reply had finished.
        const [role, hello, , , usage] = chunks() as Record<string, unknown>[];
        const failed = {
          ...hello,
          error: { code: 502, message: 'Provider returned error' },
          choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
        };
        if (body.stream === false) {
          res.writeHead(200, { 'content-type': 'application/json' });
          return void res.end(
            JSON.stringify({
              ...failed,
              object: 'chat.completion',
              choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: 'error' }],
              usage: usage?.usage,
            }),
          );
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (const chunk of [role, hello, failed, usage]) res.write(`data: ${JSON.stringify(chunk)}\n\n`);
        res.end('data: [DONE]\n\n');
        return;
      }
      if (body.messages.some((msg) => msg.content.includes('mode=no-choices'))) {
        // A non-stream completion that answers nothing: no choice at all.
        res.writeHead(200, { 'content-type': 'application/json' });
        const usage = { prompt_tokens: 7, completion_tokens: 0, total_tokens: 7 };
        const reply = { id: 'chatcmpl-none', object: 'chat.completion', created: 1, model: HIDDEN };
        const choices = body.messages.some((msg) => msg.content.includes('null-message'))
          ? [{ index: 0, message: null, finish_reason: 'stop' }]
          : [];
        return void res.end(JSON.stringify({ ...reply, choices, usage }));
      }
      if (body.messages.some((msg) => msg.content.includes('mode=two-choices'))) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (const chunk of twoChoices()) res.write(line(chunk));
        res.end('data: [DONE]\n\n');
        return;
      }
      const special = Object.keys(FAULTY).find((m) =>
        body.messages.some((msg) => msg.content.includes(`mode=${m}`)),
      );
      if (special) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        return void (FAULTY[special] as (res: ServerResponse) => void)(res);
      }
      const mode = Object.keys(MODES).find((m) =>
        body.messages.some((msg) => msg.content.includes(`mode=${m}`)),
      );
      const write = MODES[mode ?? 'no-done'] as (chunk: object) => string;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const chunk of chunks()) res.write(write(chunk));
      if (mode !== 'no-done') res.write('data: [DONE]\n\n');
      res.end();
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const { port } = upstream.address() as AddressInfo;
  t = await startTestStack({
    upstreamBaseUrl: `http://127.0.0.1:${port}/v1`,
    upstreamModel: HIDDEN,
    upstreamApiKey: UPSTREAM_KEY,
    // Faulty replies on the one deployment, test after test: no circuit may open across them.
    functionEnv: { ...NO_CIRCUIT_BREAKING, UPSTREAM_STREAM_FIRST_BYTE_TIMEOUT_MS: String(FIRST_BYTE_MS) },
  });
}, 120_000);

afterAll(async () => {
  await t?.stop();
  await new Promise((resolve) => upstream?.close(resolve));
});

const stream = async (mode: string) => {
  await drainSettlements(t.stack);
  const res = await t.post('/chat/completions', {
    model: MODEL,
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: `mode=${mode}` }],
  });
  expect(res.status).toBe(200);
  return { text: await res.text(), requestId: res.headers.get('x-request-id') };
};

/**
 * Streams in `mode` and checks the client got a broken stream, as documented: every line a chunk the SDKs parse,
 * no `[DONE]`, the error event last, and nothing charged. Returns the text the client received.
 */
const expectInterrupted = async (mode: string): Promise<string> => {
  const { text } = await stream(mode);
  const events = sseEvents(text);
  expect(events).not.toContain('[DONE]');
  const parsed = events.map((data) => JSON.parse(data) as { error?: { code: string } });
  expect(parsed.at(-1)?.error).toMatchObject({ code: 'stream_interrupted' });
  const [record] = await takeSettlements(t.stack, 1);
  expect(record).toMatchObject({ outcome: 'stream_interrupted', cost: 0 });
  return text;
};

describe('a speech reply that is no audio', () => {
  it.each(['json', 'html'])(
    'a 200 of %s is a faulty reply: never relayed as audio, never billed',
    async (mode) => {
      await drainSettlements(t.stack);
      const res = await t.post('/audio/speech', {
        model: 'svc-tts',
        input: `mode=speech-${mode}`,
        voice: 'alloy',
      });
      expect(res.status).toBe(500);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe('server_error');
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({ outcome: 'upstream_error', cost: 0 });
    },
  );
});

describe('an upstream stream written differently', () => {
  it.each(['spaced', 'multiline', 'no-done', 'dated', 'space-before-colon', 'text-first', 'no-role'])(
    '(%s) reaches the client as OpenAI writes it: the opening chunk, one-line events, our model name, [DONE], billed',
    async (mode) => {
      const { text } = await stream(mode);
      // Every event one `data:` line, each a chunk OpenAI's schema accepts, and nothing names the upstream's model.
      expect(text).not.toContain(HIDDEN);
      const events = sseEvents(text);
      expect(events.at(-1)).toBe('[DONE]');
      const parsed = events.slice(0, -1).map((data) => JSON.parse(data) as Record<string, unknown>);
      for (const chunk of parsed) {
        expect(chunk.model).toBe(MODEL);
        expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
      }
      for (const line of text.split('\n')) expect(line === '' || line.startsWith('data: ')).toBe(true);
      // Spec §4 rule 3: the first chunk carries the role, with empty content.
      expect(parsed[0]).toMatchObject({ id: 'chatcmpl-wire', created: 1 });
      expect(parsed[0]?.choices).toMatchObject([
        { index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null },
      ]);
      expect(parsed.filter((c) => JSON.stringify(c).includes('"content":""'))).toHaveLength(1);
      const content = parsed
        .flatMap((c) => (c.choices as { delta: { content?: string } }[]).map((ch) => ch.delta.content ?? ''))
        .join('');
      expect(content).toBe('Hello there');
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({ outcome: 'success', usage: { promptTokens: 7, completionTokens: 2 } });
      expect(record?.cost).toBeGreaterThan(0);
    },
  );
});

describe('a stream of several choices (n = 2)', () => {
  it('opens each choice before its first text, even one that first appears after the first chunk', async () => {
    await drainSettlements(t.stack);
    const res = await t.post('/chat/completions', {
      model: MODEL,
      stream: true,
      n: 2,
      messages: [{ role: 'user', content: 'mode=two-choices' }],
    });
    expect(res.status).toBe(200);
    const events = sseEvents(await res.text());
    expect(events.at(-1)).toBe('[DONE]');
    const parsed = events.slice(0, -1).map((data) => JSON.parse(data) as Record<string, unknown>);
    for (const chunk of parsed) expect(schemaErrors('CreateChatCompletionStreamResponse', chunk)).toBe('');
    // Each choice's deltas in order: the first carries the role and empty content, the text follows.
    const deltas = (index: number) =>
      parsed.flatMap((c) =>
        (c.choices as { index: number; delta: Record<string, unknown> }[])
          .filter((ch) => ch.index === index)
          .map((ch) => ch.delta),
      );
    expect(deltas(0)).toEqual([{ role: 'assistant', content: '' }, { content: 'A' }, {}]);
    expect(deltas(1)).toEqual([{ role: 'assistant', content: '' }, { role: 'assistant', content: 'B' }, {}]);
    // The opening made for choice 1 is the upstream's chunk's, relabelled.
    const madeOpening = parsed.find((c) => JSON.stringify(c.choices).includes('"index":1'));
    expect(madeOpening).toMatchObject({ id: 'chatcmpl-two', created: 2, model: MODEL });
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ outcome: 'success', usage: { promptTokens: 7, completionTokens: 2 } });
  });
});

describe('an upstream that breaks the protocol around a reply', () => {
  it('reset after the whole reply arrived: the client still gets it whole, [DONE] and all, and it is billed', async () => {
    const { text } = await stream('reset-after-reply');
    const events = sseEvents(text);
    expect(events.at(-1)).toBe('[DONE]');
    expect(text).not.toContain('stream_interrupted');
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ outcome: 'success', usage: { promptTokens: 7, completionTokens: 2 } });
    expect(record?.cost).toBeGreaterThan(0);
  });

  it.each(['error-after-whole', 'finish-then-garbage'])(
    '(%s): a fault after the whole reply takes nothing from it: [DONE], billed',
    async (mode) => {
      const { text } = await stream(mode);
      const events = sseEvents(text);
      expect(events.at(-1)).toBe('[DONE]');
      expect(text).not.toContain('stream_interrupted');
      expect(text).not.toContain('not json');
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({ outcome: 'success' });
      expect(record?.usage).toMatchObject({ completionTokens: 2 });
      expect(record?.cost).toBeGreaterThan(0);
    },
  );

  it.each(['early-done', 'not-json'])(
    '(%s): the stream ends with the error event, every line a chunk the SDKs parse, uncharged',
    async (mode) => {
      await expectInterrupted(mode);
    },
  );

  it.each(['groq', 'padded', 'keep-alive'])(
    '(%s): relayed whole, one usage chunk, billed on the usage the upstream reported',
    async (mode) => {
      const { text } = await stream(mode);
      const events = sseEvents(text);
      expect(events.at(-1)).toBe('[DONE]');
      expect(events.filter((data) => data.includes('"choices":[]'))).toHaveLength(1);
      // Every event but the last a chunk with choices, as the SDKs index it.
      for (const data of events.slice(0, -1)) expect(JSON.parse(data)).toHaveProperty('choices');
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({
        outcome: 'success',
        usage: { promptTokens: 7, completionTokens: 2, source: 'upstream' },
      });
    },
  );

  it.each(['running-usage-reset', 'empty-finish-reset'])(
    '(%s): a reply cut mid-way is not whole, whatever its chunks say early: interrupted, uncharged',
    async (mode) => {
      await expectInterrupted(mode);
    },
  );

  it.each(['ping-first', 'object-first'])(
    '(%s): a first event that is no chunk fails the attempt before anything reaches the client',
    async (mode) => {
      await drainSettlements(t.stack);
      const res = await t.post('/chat/completions', {
        model: MODEL,
        stream: true,
        messages: [{ role: 'user', content: `mode=${mode}` }],
      });
      // One deployment here, so no other to fall back to: an error response, not a 200 with a broken stream.
      expect(res.status).toBeGreaterThanOrEqual(500);
      await res.text();
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({ cost: 0 });
    },
  );

  it.each(['mode=no-choices', 'mode=no-choices null-message'])(
    '(%s): a non-stream completion that answers nothing is an upstream failure, not a 200 billed for its prompt',
    async (content) => {
      await drainSettlements(t.stack);
      const res = await t.post('/chat/completions', { model: MODEL, messages: [{ role: 'user', content }] });
      expect(res.status).toBeGreaterThanOrEqual(500);
      await res.text();
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({ cost: 0 });
    },
  );

  it('keep-alives alone commit nothing: the first-byte timeout still cuts the attempt', async () => {
    await drainSettlements(t.stack);
    const res = await t.post('/chat/completions', {
      model: MODEL,
      stream: true,
      messages: [{ role: 'user', content: 'mode=only-keep-alives' }],
    });
    // An error response (the upstream's first byte never came) — not a 200 committed to an upstream that only pings.
    expect(res.status).toBeGreaterThanOrEqual(500);
    await res.text();
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ cost: 0 });
  });

  it('output after an early usage report is billed by our count on top of it, and the client is shown that', async () => {
    const { text } = await stream('early-usage');
    const events = sseEvents(text);
    expect(events.at(-1)).toBe('[DONE]');
    const last = JSON.parse(events.at(-2) as string) as { choices: unknown[]; usage: Record<string, number> };
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 2 });
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({
      outcome: 'success',
      usage: { promptTokens: 7, completionTokens: 2, source: 'estimated' },
    });
  });

  it('a usage chunk sent twice reaches the client once, and is billed once', async () => {
    const { text } = await stream('two-usage');
    const usageChunks = sseEvents(text).filter((data) => data.includes('"usage":{'));
    expect(usageChunks).toHaveLength(1);
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ outcome: 'success', usage: { promptTokens: 7, completionTokens: 2 } });
  });
});

describe("an aggregator's error inside a 200", () => {
  it('mid-stream: ends the stream with an explicit error event, uncharged, never relaying finish_reason "error"', async () => {
    expect(await expectInterrupted('aggregator-error')).not.toContain('"finish_reason":"error"');
  });

  it('in a non-stream reply: an upstream failure, not a completion that finished', async () => {
    await drainSettlements(t.stack);
    const res = await t.post('/chat/completions', {
      model: MODEL,
      stream: false,
      messages: [{ role: 'user', content: 'mode=aggregator-error' }],
    });
    expect(res.status).toBeGreaterThanOrEqual(500);
    const [record] = await takeSettlements(t.stack, 1);
    expect(record).toMatchObject({ cost: 0 });
    expect(record?.outcome).not.toBe('success');
  });
});

describe('usage above what the call allowed', () => {
  it.each([false, true])(
    'is billed, and shown, at the completion cap sent upstream (stream: %s), never past it',
    async (streamed) => {
      await drainSettlements(t.stack);
      const res = await t.post('/chat/completions', {
        model: MODEL,
        max_tokens: 16,
        stream: streamed,
        ...(streamed ? { stream_options: { include_usage: true } } : {}),
        messages: [{ role: 'user', content: 'mode=huge-usage' }],
      });
      expect(res.status).toBe(200);
      const text = await res.text();
      const shown = streamed
        ? (JSON.parse(sseEvents(text).at(-2) as string) as { usage: { completion_tokens: number } }).usage
        : (JSON.parse(text) as { usage: { completion_tokens: number } }).usage;
      expect(shown.completion_tokens).toBe(16);
      const [record] = await takeSettlements(t.stack, 1);
      expect(record?.usage).toMatchObject({ promptTokens: 7, completionTokens: 16 });
      // Within the hold the cap sized: nothing owed, nothing above it.
      expect(record?.cost).toBeLessThanOrEqual(record?.admission?.hold?.amount ?? 0);
    },
  );
});

describe('an upstream refusal quoting our key', () => {
  it('reaches the client as a 400 with the key, and every piece of it, masked', async () => {
    await drainSettlements(t.stack);
    const res = await t.post('/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'mode=echo-key' }],
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe('invalid_value');
    expect(body.error.message).toMatch(/^Invalid value for 'messages' with \[redacted\]/);
    for (let i = 0; i + 8 <= UPSTREAM_KEY.length; i++)
      expect(body.error.message).not.toContain(UPSTREAM_KEY.slice(i, i + 8));
    const [record] = await takeSettlements(t.stack, 1);
    expect(JSON.stringify(record)).not.toContain(UPSTREAM_KEY.slice(0, 8));
  });

  it.each([
    ['seconds', 'famB-5.2', { 'retry-after': '7', 'retry-after-ms': '7000' }],
    ['ms', 'famB-5.3', { 'retry-after': '3', 'retry-after-ms': '2500' }],
  ])(
    'passes on when a busy upstream said to come back (%s), not a blanket second',
    async (how, model, expected) => {
      // One model each: every one of its deployments answers busy, so the client is told to retry (429) and when.
      await drainSettlements(t.stack);
      const res = await t.post('/chat/completions', {
        model,
        messages: [{ role: 'user', content: `mode=busy-${how}` }],
      });
      expect(res.status).toBe(429);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('engine_overloaded');
      expect({
        'retry-after': res.headers.get('retry-after'),
        'retry-after-ms': res.headers.get('retry-after-ms'),
      }).toEqual(expected);
      const [record] = await takeSettlements(t.stack, 1);
      expect(record).toMatchObject({ outcome: 'overloaded', status: 429 });
    },
  );
});
