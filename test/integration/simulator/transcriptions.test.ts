import { encode } from 'gpt-tokenizer';
import { describe, expect, test } from 'vitest';
import { INVALID_AUDIO_FILE_ERROR } from '#sim/transcriptions.ts';
import { encodeAudio, type InputAudioFormat, makeWav } from '#test/audio.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';
import { isSocketError, type PostOptions, postForm, postJson, readText } from './client.ts';
import { useSimulator } from './use-simulator.ts';

const PATH = '/v1/audio/transcriptions';
const TEXT_PLAIN = 'text/plain; charset=utf-8';

const sim = useSimulator();

/** 7.3 seconds of audio: 18 words (7.3 × 2.5, rounded), billed as 8 seconds. */
const WAV = makeWav({ durationMs: 7300 });

interface Upload {
  bytes: Buffer;
  filename?: string;
  type?: string;
}

type Fields = Record<string, string | string[]>;

function form(upload: Upload | null, fields: Fields = {}): FormData {
  const data = new FormData();
  if (upload !== null) {
    data.append(
      'file',
      new Blob([upload.bytes], { type: upload.type ?? 'audio/wav' }),
      upload.filename ?? 'a.wav',
    );
  }
  for (const [name, value] of Object.entries({ model: 'whisper-1', ...fields })) {
    for (const item of Array.isArray(value) ? value : [value]) data.append(name, item);
  }
  return data;
}

function transcribe(fields: Fields = {}, upload: Upload = { bytes: WAV }, options?: PostOptions) {
  return postForm(sim().url, PATH, form(upload, fields), options);
}

async function transcribeJson<T>(fields: Fields = {}, upload?: Upload): Promise<T> {
  const response = await transcribe(fields, upload);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('application/json');
  return (await response.json()) as T;
}

async function transcribeText(format: string, upload?: Upload): Promise<string> {
  const response = await transcribe({ response_format: format }, upload);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe(TEXT_PLAIN);
  return response.text();
}

interface JsonTranscript {
  text: string;
  usage?: { type: string; seconds: number };
}

interface Segment {
  id: number;
  seek: number;
  start: number;
  end: number;
  text: string;
  tokens: number[];
  temperature: number;
}

interface VerboseTranscript extends JsonTranscript {
  task: string;
  language: string;
  duration: number;
  segments?: Segment[];
  words?: Array<{ word: string; start: number; end: number }>;
}

async function error(response: Response): Promise<{ message: string; param: string | null }> {
  expect(response.status).toBe(400);
  return ((await response.json()) as { error: { message: string; param: string | null } }).error;
}

describe('response formats', () => {
  test('json is the text and the duration usage, valid against the OpenAI schema', async () => {
    const body = await transcribeJson<JsonTranscript>();
    expect(schemaErrors('CreateTranscriptionResponseJson', body)).toBe('');
    expect(body.usage).toEqual({ type: 'duration', seconds: 8 });
    expect(body.text).toMatch(/^[A-Z][a-z]*( [a-z]+)*\.$/);
    expect(body.text.split(' ')).toHaveLength(18);
  });

  test('the same file always transcribes the same way; another file differently', async () => {
    const first = await transcribeJson<JsonTranscript>();
    const second = await transcribeJson<JsonTranscript>({}, { bytes: WAV, filename: 'renamed.wav' });
    const other = await transcribeJson<JsonTranscript>(
      {},
      { bytes: makeWav({ durationMs: 7300, frequencyHz: 300 }) },
    );
    expect(second.text).toBe(first.text);
    expect(other.text).not.toBe(first.text);
  });

  test('text is the transcript and a newline, as text/plain', async () => {
    const { text } = await transcribeJson<JsonTranscript>();
    expect(await transcribeText('text')).toBe(`${text}\n`);
  });

  test('srt is a SubRip document of 12-word cues', async () => {
    const { text } = await transcribeJson<JsonTranscript>();
    const srt = await transcribeText('srt');
    const cues = srt.split('\n\n').filter((cue) => cue !== '');
    expect(cues).toHaveLength(2);
    expect(cues[0]).toMatch(/^1\n00:00:00,000 --> 00:00:0\d,\d{3}\n[A-Z][a-z]*( [a-z]+){11}$/);
    expect(cues[1]).toMatch(/^2\n00:00:0\d,\d{3} --> 00:00:07,300\n[a-z]+( [a-z]+){5}\.$/);
    expect(srt.endsWith('\n\n')).toBe(true);
    expect(cues.map((cue) => cue.split('\n')[2]).join(' ')).toBe(text);
  });

  test('vtt is a WebVTT document with the same cues', async () => {
    const { text } = await transcribeJson<JsonTranscript>();
    const vtt = await transcribeText('vtt');
    expect(vtt.startsWith('WEBVTT\n\n00:00:00.000 --> ')).toBe(true);
    const cues = vtt.split('\n\n').slice(1, -1);
    expect(cues).toHaveLength(2);
    expect(cues[1]).toMatch(/^00:00:0\d\.\d{3} --> 00:00:07\.300\n/);
    expect(cues.map((cue) => cue.split('\n')[1]).join(' ')).toBe(text);
  });

  test('verbose_json has segments with every OpenAI field, and the measured duration', async () => {
    const body = await transcribeJson<VerboseTranscript>({ response_format: 'verbose_json' });
    expect(schemaErrors('CreateTranscriptionResponseVerboseJson', body)).toBe('');
    expect(body).toMatchObject({ task: 'transcribe', language: 'english', duration: 7.3 });
    expect(body.usage).toEqual({ type: 'duration', seconds: 8 });
    expect(body).not.toHaveProperty('words');
    const segments = body.segments ?? [];
    expect(segments.map((s) => s.id)).toEqual([0, 1]);
    expect(segments[0]?.start).toBe(0);
    expect(segments[1]?.end).toBe(7.3);
    expect(segments[0]?.end).toBe(segments[1]?.start);
    expect(
      segments
        .map((s) => s.text)
        .join('')
        .trim(),
    ).toBe(body.text);
    for (const segment of segments) {
      expect(segment.text.startsWith(' ')).toBe(true);
      expect(segment.tokens).toEqual(encode(segment.text));
      expect(segment).toMatchObject({ seek: 0, temperature: 0 });
      for (const field of ['avg_logprob', 'compression_ratio', 'no_speech_prob']) {
        expect(segment).toHaveProperty(field, expect.any(Number));
      }
    }
  });

  test('word granularity adds timed words; segments stay only when asked for too', async () => {
    const words = await transcribeJson<VerboseTranscript>({
      response_format: 'verbose_json',
      'timestamp_granularities[]': 'word',
    });
    expect(schemaErrors('CreateTranscriptionResponseVerboseJson', words)).toBe('');
    expect(words).not.toHaveProperty('segments');
    expect(words.words).toHaveLength(18);
    expect(words.words?.map((w) => w.word).join(' ')).toBe(words.text.slice(0, -1));
    expect(words.words?.[0]?.start).toBe(0);
    expect(words.words?.at(-1)?.end).toBe(7.3);

    const both = await transcribeJson<VerboseTranscript>({
      response_format: 'verbose_json',
      'timestamp_granularities[]': ['word', 'segment'],
      language: 'fr',
      temperature: '0.4',
    });
    expect(both.segments).toHaveLength(2);
    expect(both.words).toHaveLength(18);
    expect(both.language).toBe('fr');
    expect(both.segments?.[0]?.temperature).toBe(0.4);
  });
});

describe('audio files', () => {
  test('an mp3 made by ffmpeg is measured from its frames', async () => {
    const mp3 = await encodeAudio(makeWav({ durationMs: 3200 }), 'mp3');
    const upload = { bytes: mp3, filename: 'speech.mp3', type: 'audio/mpeg' };
    const body = await transcribeJson<VerboseTranscript>({ response_format: 'verbose_json' }, upload);
    expect(body.usage).toEqual({ type: 'duration', seconds: 4 });
    expect(body.duration).toBeGreaterThanOrEqual(3.2);
    expect(body.duration).toBeLessThan(3.35);
  });

  test.each<[InputAudioFormat, string]>([
    ['flac', 'audio/flac'],
    ['ogg', 'audio/ogg'],
    ['opus', 'audio/ogg'],
    ['aac', 'audio/aac'],
    ['webm', 'audio/webm'],
    ['m4a', 'audio/mp4'],
  ])('%s uploads are measured too', async (format, type) => {
    const bytes = await encodeAudio(makeWav({ durationMs: 2600 }), format);
    const body = await transcribeJson<VerboseTranscript>(
      { response_format: 'verbose_json' },
      { bytes, filename: `clip.${format}`, type },
    );
    expect(body.usage?.seconds).toBe(3);
    expect(body.duration).toBeGreaterThanOrEqual(2.6);
    expect(body.duration).toBeLessThan(2.75);
  });

  test('a stereo 44.1 kHz WAV and a wrong content type are measured from the content', async () => {
    const stereo = makeWav({ durationMs: 1500, sampleRate: 44_100, channels: 2 });
    const body = await transcribeJson<VerboseTranscript>(
      { response_format: 'verbose_json' },
      { bytes: stereo, filename: 'upload.bin', type: 'audio/mpeg' },
    );
    expect(body.duration).toBe(1.5);
    expect(body.usage?.seconds).toBe(2);
  });

  test('a very short clip still has one word', async () => {
    const body = await transcribeJson<JsonTranscript>({}, { bytes: makeWav({ durationMs: 100 }) });
    expect(body.text).toMatch(/^[A-Z][a-z]*\.$/);
    expect(body.usage?.seconds).toBe(1);
  });

  test.each<[string, Buffer]>([
    ['text', Buffer.from('this is not audio at all')],
    ['an empty file', Buffer.alloc(0)],
    ['a WAV without samples', makeWav({ durationMs: 0 })],
    ['a truncated WAV header', WAV.subarray(0, 30)],
  ])('%s is a 400 with OpenAI’s invalid file format error', async (_name, bytes) => {
    const response = await transcribe({}, { bytes });
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual(INVALID_AUDIO_FILE_ERROR);
    expect(INVALID_AUDIO_FILE_ERROR).toEqual({
      error: {
        message:
          "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', 'mp4', 'mpeg', 'mpga', 'oga', 'ogg', 'wav', 'webm']",
        type: 'invalid_request_error',
        param: null,
        code: null,
      },
    });
  });
});

describe('invalid requests', () => {
  test('a JSON body is a 400 asking for multipart/form-data', async () => {
    const response = await postJson(sim().url, PATH, { model: 'whisper-1', file: 'a.wav' });
    expect((await error(response)).message).toContain('multipart/form-data');
  });

  test('a missing model or file is a 400', async () => {
    const noModel = new FormData();
    noModel.append('file', new Blob([WAV]), 'a.wav');
    expect((await error(await postForm(sim().url, PATH, noModel))).message).toBe(
      'you must provide a model parameter',
    );
    expect((await error(await postForm(sim().url, PATH, form(null)))).param).toBe('file');
    const textFile = form(null, { file: 'not a file' });
    expect((await error(await postForm(sim().url, PATH, textFile))).param).toBe('file');
  });

  test.each<[string, Fields]>([
    ['response_format', { response_format: 'xml' }],
    ['timestamp_granularities', { response_format: 'verbose_json', 'timestamp_granularities[]': 'sentence' }],
    ['temperature', { temperature: 'hot' }],
    ['temperature', { temperature: '1.5' }],
  ])('a bad %s is a 400', async (param, fields) => {
    expect((await error(await transcribe(fields))).param).toBe(param);
  });

  test('unknown fields are ignored and recorded in the call log', async () => {
    const response = await transcribe({ include: 'logprobs', chunking_strategy: 'auto' }, undefined, {
      provider: 'stt-log',
    });
    expect(response.status).toBe(200);
    expect(sim().calls('stt-log')).toEqual([
      expect.objectContaining({
        path: PATH,
        model: 'whisper-1',
        body: {
          file: { filename: 'a.wav', type: 'audio/wav', size: WAV.length },
          model: 'whisper-1',
          include: 'logprobs',
          chunking_strategy: 'auto',
        },
      }),
    ]);
  });
});

describe('faults', () => {
  test('a directive in the prompt injects a fault', async () => {
    const response = await transcribe({ prompt: 'Names: Ada. [[sim: fault=overloaded]]' });
    expect(response.status).toBe(429);
  });

  test('omit_usage in the prompt leaves usage out of json and verbose_json', async () => {
    const prompt = '[[sim: omit_usage=1]]';
    expect(await transcribeJson<JsonTranscript>({ prompt })).not.toHaveProperty('usage');
    const verbose = await transcribeJson<VerboseTranscript>({ prompt, response_format: 'verbose_json' });
    expect(verbose).not.toHaveProperty('usage');
    expect(verbose.duration).toBe(7.3);
  });

  test('a malformed directive in the prompt is a 400', async () => {
    expect((await error(await transcribe({ prompt: '[[sim: fault=explode]]' }))).message).toContain('fault');
  });

  test('drop_mid truncates the body, whatever the format', async () => {
    for (const format of ['json', 'srt']) {
      const whole = await (await transcribe({ response_format: format })).text();
      const response = await transcribe({ response_format: format }, undefined, {
        headers: { 'x-sim-fault': 'drop_mid' },
      });
      expect(response.status).toBe(200);
      const { text, error: failure } = await readText(response);
      expect(isSocketError(failure)).toBe(true);
      expect(text.length).toBeGreaterThan(0);
      expect(text.length).toBeLessThan(whole.length);
    }
  });

  test('a provider fault applies on its /p/<provider> path', async () => {
    sim().setFaults('stt-a', { error: 'server_error' });
    expect((await transcribe({}, undefined, { provider: 'stt-a' })).status).toBe(500);
    expect((await transcribe({}, undefined, { provider: 'stt-b' })).status).toBe(200);
  });
});
