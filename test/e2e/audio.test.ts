import OpenAI, { toFile } from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio, encodeAudio, encodeAudioToPipe, makeWav, type SpeechAudioFormat } from '#test/audio.ts';
import { debitOf, fundedAccount, settledWallet } from '#test/billing.ts';
import { compileOpenAiSchema } from '#test/openapi-schemas.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({ consumers: true });
});
afterAll(() => t?.stop());
afterEach(() => t.simulator.resetFaults());

const sdk = (key: string) => new OpenAI({ baseURL: t.baseURL, apiKey: key, maxRetries: 0, timeout: 30_000 });

/** svc-stt: 0.001 USD per minute, billed per millisecond of measured audio (nano-USD, rounded half up). */
const sttCost = (ms: number) => Math.round((ms * 1_000_000) / 60_000);
/** svc-tts: 25 USD per 1M characters = 25,000 nano-USD per character. */
const NANO_PER_CHARACTER = 25_000;

const upload = (key: string, file: Blob, filename: string, fields: Record<string, string> = {}) => {
  const form = new FormData();
  form.set('file', file, filename);
  form.set('model', 'svc-stt');
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  return fetch(`${t.baseURL}/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    body: form,
  });
};

describe('POST /v1/audio/transcriptions with the official openai SDK', () => {
  const wav = makeWav({ durationMs: 3_000 });

  it('returns json by default, with the measured duration as usage', async () => {
    const { key } = await fundedAccount(t);
    const transcription = await sdk(key).audio.transcriptions.create({
      file: await toFile(wav, 'speech.wav', { type: 'audio/wav' }),
      model: 'svc-stt',
    });
    expect(transcription.text.length).toBeGreaterThan(0);
    expect(transcription.usage).toEqual({ type: 'duration', seconds: 3 });
    const validate = compileOpenAiSchema('CreateTranscriptionResponseJson');
    expect(validate(transcription), JSON.stringify(validate.errors)).toBe(true);
  });

  it('returns verbose_json with segments and words', async () => {
    const { key } = await fundedAccount(t);
    const transcription = await sdk(key).audio.transcriptions.create({
      file: await toFile(wav, 'speech.wav'),
      model: 'svc-stt',
      response_format: 'verbose_json',
      timestamp_granularities: ['word', 'segment'],
      language: 'en',
    });
    const validate = compileOpenAiSchema('CreateTranscriptionResponseVerboseJson');
    expect(validate(transcription), JSON.stringify(validate.errors)).toBe(true);
    expect(transcription.duration).toBeCloseTo(3, 1);
    expect(transcription.segments?.length).toBeGreaterThan(0);
    expect(transcription.words?.length).toBeGreaterThan(0);
  });

  it.each([
    ['text', 'text/plain; charset=utf-8', /^\S.*\n?$/s],
    ['srt', 'application/x-subrip; charset=utf-8', /^1\r?\n00:00:00,000 --> 00:00:\d\d,\d{3}\r?\n/],
    ['vtt', 'text/vtt; charset=utf-8', /^WEBVTT\r?\n/],
  ] as const)('returns %s as %s', async (format, contentType, shape) => {
    const { key } = await fundedAccount(t);
    const text = await sdk(key).audio.transcriptions.create({
      file: await toFile(wav, 'speech.wav'),
      model: 'svc-stt',
      response_format: format,
    });
    expect(typeof text).toBe('string');
    expect(text).toMatch(shape);
    const raw = await upload(key, new Blob([wav]), 'speech.wav', { response_format: format });
    expect(raw.headers.get('content-type')).toBe(contentType);
  });
});

/** The media type each measured format is sent upstream with. */
const UPSTREAM_TYPES = {
  mp3: 'audio/mpeg',
  flac: 'audio/flac',
  ogg: 'audio/ogg',
  webm: 'audio/webm',
  m4a: 'audio/mp4',
} as const;

describe('what a transcription is billed on', () => {
  it.each(['mp3', 'flac', 'ogg', 'webm', 'm4a'] as const)(
    'measures a %s upload’s duration from the file and debits 0.001 USD per minute',
    async (format) => {
      const { id, key } = await fundedAccount(t);
      const audio = await encodeAudio(makeWav({ durationMs: 4_000 }), format);
      t.simulator.clearCalls();
      // The client's own claims (file name, content type) play no part.
      const response = await upload(key, new Blob([audio], { type: 'audio/wav' }), 'claims-to-be.wav');
      expect(response.status).toBe(200);
      // Nor are they what the provider is told: it picks its decoder by the file name's extension.
      expect(t.simulator.calls()).toEqual([
        expect.objectContaining({
          body: expect.objectContaining({
            file: { filename: `audio.${format}`, type: UPSTREAM_TYPES[format], size: audio.length },
          }),
        }),
      ]);
      const { usage } = (await response.json()) as { usage: { seconds: number } };
      expect(usage.seconds).toBeGreaterThan(3.9);
      expect(usage.seconds).toBeLessThan(4.2);
      const wallet = await settledWallet(t, id);
      expect(debitOf(wallet, response.headers.get('x-request-id') as string)).toBe(
        sttCost(Math.ceil(usage.seconds * 1000)),
      );
    },
  );

  it.each(['flac', 'webm'] as const)(
    'accepts a %s recorded to a pipe (no duration in its header), measures it by its frames and debits that',
    async (format) => {
      const { id, key } = await fundedAccount(t);
      const audio = await encodeAudioToPipe(makeWav({ durationMs: 4_000 }), format);
      const response = await upload(key, new Blob([audio], { type: `audio/${format}` }), `live.${format}`);
      expect(response.status).toBe(200);
      const { usage } = (await response.json()) as { usage: { seconds: number } };
      expect(usage.seconds).toBeGreaterThan(3.95);
      expect(usage.seconds).toBeLessThan(4.05);
      const wallet = await settledWallet(t, id);
      expect(debitOf(wallet, response.headers.get('x-request-id') as string)).toBe(
        sttCost(Math.ceil(usage.seconds * 1000)),
      );
    },
  );

  it('debits exactly the WAV’s duration', async () => {
    const { id, key } = await fundedAccount(t);
    const response = await upload(
      key,
      new Blob([makeWav({ durationMs: 90_000, sampleRate: 8_000 })]),
      'long.wav',
    );
    expect(response.status).toBe(200);
    const wallet = await settledWallet(t, id);
    expect(debitOf(wallet, response.headers.get('x-request-id') as string)).toBe(sttCost(90_000));
    expect(sttCost(90_000)).toBe(1_500_000); // 1.5 minutes at 0.001 USD
  });

  it.each([
    ['text that is not audio', Buffer.from('definitely not audio, just words'), 'invalid_file_format'],
    ['a WAV header with no samples', makeWav({ durationMs: 1_000 }).subarray(0, 44), 'invalid_audio'],
  ])('refuses %s with 400 before calling any upstream or holding anything', async (_, bytes, code) => {
    const { id, key } = await fundedAccount(t);
    t.simulator.clearCalls();
    const response = await upload(key, new Blob([bytes]), 'speech.wav');
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: unknown }).error).toMatchObject({ code, param: 'file' });
    expect(t.simulator.calls()).toHaveLength(0);
    expect((await t.stack.container.accounting.report(id)).holds).toHaveLength(0);
  });

  it('refuses an upload over the documented 4 MiB limit with 413', async () => {
    const { key } = await fundedAccount(t);
    const response = await upload(key, new Blob([Buffer.alloc(4 * 1024 * 1024 + 1)]), 'big.wav');
    expect(response.status).toBe(413);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('request_too_large');
  });

  it.each([
    [{ response_format: 'diarized_json' }, 'response_format'],
    [{ temperature: '1.5' }, 'temperature'],
    [{ language: 'english' }, 'language'],
    [{ 'timestamp_granularities[]': 'word' }, 'timestamp_granularities[]'],
    [{ stream: 'true' }, 'stream'],
  ])('refuses the fields %j with 400 naming %s', async (fields, param) => {
    const { key } = await fundedAccount(t);
    const response = await upload(key, new Blob([makeWav({ durationMs: 500 })]), 'a.wav', fields);
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { param: string } }).error.param).toBe(param);
  });
});

describe('POST /v1/audio/speech with the official openai SDK', () => {
  const input = 'The gateway streams this sentence back as audio.';

  it.each([
    ['mp3', 'mp3', 'audio/mpeg'],
    ['opus', 'opus', 'audio/ogg'],
    ['aac', 'aac', 'audio/aac'],
    ['flac', 'flac', 'audio/flac'],
    ['wav', 'pcm_s16le', 'audio/wav'],
    ['pcm', 'pcm_s16le', 'audio/pcm'],
  ] as const)('returns %s audio that decodes as %s, served as %s', async (format, codec, contentType) => {
    const { key } = await fundedAccount(t);
    const response = await sdk(key).audio.speech.create({
      model: 'svc-tts',
      input,
      voice: 'alloy',
      response_format: format as SpeechAudioFormat,
    });
    expect(response.headers.get('content-type')).toBe(contentType);
    const audio = await decodeAudio(Buffer.from(await response.arrayBuffer()), format);
    expect(audio.codec).toBe(codec);
    // The simulator speaks 60 ms per character; codecs pad a few frames.
    expect(audio.durationMs).toBeGreaterThan(input.length * 60 - 80);
    expect(audio.durationMs).toBeLessThan(input.length * 60 + 200);
  });

  /** What a funded account is debited for one speech call of `body` (pcm, voice nova), once it has settled. */
  const speechDebit = async (body: Record<string, unknown>): Promise<number | undefined> => {
    const { id, key } = await fundedAccount(t);
    const response = await fetch(`${t.baseURL}/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'svc-tts', voice: 'nova', response_format: 'pcm', ...body }),
    });
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    return debitOf(await settledWallet(t, id), response.headers.get('x-request-id') as string);
  };

  it('debits 25 USD per 1M input characters, counting code points', async () => {
    const text = 'Grüße, 世界! 🎧';
    expect(await speechDebit({ input: text })).toBe([...text].length * NANO_PER_CHARACTER);
  });

  it('debits the characters of instructions too: the provider is sent them, and charges for them', async () => {
    const instructions = 'Speak slowly, in a calm voice. 🎧';
    expect(await speechDebit({ input: 'Hi', instructions })).toBe(
      (2 + [...instructions].length) * NANO_PER_CHARACTER,
    );
  });

  it('streams audio as it arrives rather than after the whole of it', async () => {
    const { key } = await fundedAccount(t);
    const response = await fetch(`${t.baseURL}/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'svc-tts',
        input: `${'word '.repeat(20)}[[sim: chunk_delay_ms=20]]`,
        voice: 'echo',
        response_format: 'wav',
      }),
    });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const started = Date.now();
    await reader.read();
    const firstChunkMs = Date.now() - started;
    let rest = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += value.length;
    }
    const totalMs = Date.now() - started;
    expect(rest).toBeGreaterThan(0);
    // About 7 s of 24 kHz audio in 8 KiB chunks 20 ms apart: the first arrives long before the last.
    expect(totalMs - firstChunkMs).toBeGreaterThan(400);
  });

  it('cuts the response (no clean end) and charges nothing when the upstream breaks mid-audio', async () => {
    const { id, key } = await fundedAccount(t);
    const response = await fetch(`${t.baseURL}/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'svc-tts',
        input: `${'words '.repeat(200)}[[sim: fault=drop_mid drop_after_chunks=2]]`,
        voice: 'echo',
        response_format: 'wav',
      }),
    });
    expect(response.status).toBe(200);
    await expect(response.arrayBuffer()).rejects.toThrow();
    const wallet = await settledWallet(t, id);
    expect(debitOf(wallet, response.headers.get('x-request-id') as string)).toBeUndefined();
    expect(wallet.available).toBe(wallet.balance);
  });

  it.each([
    [{ voice: 'robot' }, 'voice'],
    [{ response_format: 'ogg' }, 'response_format'],
    [{ speed: 5 }, 'speed'],
    [{ input: 'x'.repeat(4097) }, 'input'],
    [{ stream_format: 'sse' }, 'stream_format'],
  ])('refuses %j with 400 naming %s', async (body, param) => {
    const { key } = await fundedAccount(t);
    const response = await fetch(`${t.baseURL}/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'svc-tts', input: 'hi', voice: 'alloy', ...body }),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { param: string } }).error.param).toBe(param);
  });
});
