import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, test, vi } from 'vitest';
import { FFMPEG_PATH_ENV } from '#sim/ffmpeg.ts';
import { SPEECH_CHUNK_BYTES, SPEECH_CONTENT_TYPES, type SpeechFormat } from '#sim/speech.ts';
import { decodeAudio } from '#test/audio.ts';
import { isSocketError, type PostOptions, postJson, readBytes } from './client.ts';
import { useSimulator } from './use-simulator.ts';

const PATH = '/v1/audio/speech';

const sim = useSimulator();

/** 50 characters: 3 seconds of audio at speed 1. */
const INPUT = 'The quick brown fox jumps over the lazy dog. Hello';

function speak(body: Record<string, unknown>, options?: PostOptions): Promise<Response> {
  return postJson(sim().url, PATH, { model: 'tts-1', input: INPUT, voice: 'alloy', ...body }, options);
}

async function speakBytes(body: Record<string, unknown>, options?: PostOptions) {
  const response = await speak(body, options);
  expect(response.status).toBe(200);
  const read = await readBytes(response);
  expect(read.error).toBeNull();
  return { response, ...read };
}

async function error(response: Response): Promise<{ message: string; param: string | null }> {
  expect(response.status).toBe(400);
  return ((await response.json()) as { error: { message: string; param: string | null } }).error;
}

/** ffmpeg processes started by this test process, read from /proc. */
function childFfmpegs(): number {
  let count = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const match = /^\d+ \((.*)\) \S+ (\d+)/.exec(stat);
      if (match?.[1] === 'ffmpeg' && Number(match[2]) === process.pid) count++;
    } catch {
      // The process ended while listing.
    }
  }
  return count;
}

describe('formats', () => {
  const expectedCodecs: Record<SpeechFormat, string> = {
    mp3: 'mp3',
    opus: 'opus',
    aac: 'aac',
    flac: 'flac',
    wav: 'pcm_s16le',
    pcm: 'pcm_s16le',
  };

  test.each(Object.keys(expectedCodecs) as SpeechFormat[])(
    '%s decodes to the input-length duration with the right codec',
    async (format) => {
      const { response, bytes } = await speakBytes({ response_format: format });
      expect(response.headers.get('content-type')).toBe(SPEECH_CONTENT_TYPES[format]);
      expect(response.headers.get('transfer-encoding')).toBe('chunked');
      expect(response.headers.get('content-length')).toBeNull();
      const decoded = await decodeAudio(bytes, format);
      expect(decoded.codec).toBe(expectedCodecs[format]);
      expect(Math.abs(decoded.durationMs - 3000)).toBeLessThanOrEqual(60);
    },
  );

  test('the default format is mp3', async () => {
    const { response, bytes } = await speakBytes({});
    expect(response.headers.get('content-type')).toBe('audio/mpeg');
    expect((await decodeAudio(bytes, 'mp3')).codec).toBe('mp3');
  });

  test('content types match OpenAI', () => {
    expect(SPEECH_CONTENT_TYPES).toEqual({
      mp3: 'audio/mpeg',
      opus: 'audio/ogg',
      aac: 'audio/aac',
      flac: 'audio/flac',
      wav: 'audio/wav',
      pcm: 'audio/pcm',
    });
  });

  test('wav is a canonical 44-byte header with exact sizes, then 24 kHz mono s16le samples', async () => {
    const { bytes } = await speakBytes({ response_format: 'wav' });
    expect(bytes.toString('ascii', 0, 4)).toBe('RIFF');
    expect(bytes.readUInt32LE(4)).toBe(bytes.length - 8);
    expect(bytes.toString('ascii', 8, 16)).toBe('WAVEfmt ');
    expect(bytes.readUInt16LE(22)).toBe(1);
    expect(bytes.readUInt32LE(24)).toBe(24_000);
    expect(bytes.readUInt16LE(34)).toBe(16);
    expect(bytes.toString('ascii', 36, 40)).toBe('data');
    expect(bytes.readUInt32LE(40)).toBe(bytes.length - 44);
    expect(bytes.length - 44).toBe(3 * 24_000 * 2);
  });

  test('pcm is exactly the samples, an audible tone rather than silence', async () => {
    const { bytes } = await speakBytes({ response_format: 'pcm' });
    expect(bytes.length).toBe(3 * 24_000 * 2);
    let peak = 0;
    for (let offset = 0; offset < bytes.length; offset += 2)
      peak = Math.max(peak, Math.abs(bytes.readInt16LE(offset)));
    expect(peak).toBeGreaterThan(0.15 * 32767);
    expect(peak).toBeLessThan(0.25 * 32767);
  });

  test('output is deterministic per voice, and voices differ', async () => {
    const a = await speakBytes({ response_format: 'pcm' });
    const b = await speakBytes({ response_format: 'pcm' });
    const other = await speakBytes({ response_format: 'pcm', voice: 'onyx' });
    const custom = await speakBytes({ response_format: 'pcm', voice: { id: 'onyx' } });
    expect(b.bytes.equals(a.bytes)).toBe(true);
    expect(other.bytes.equals(a.bytes)).toBe(false);
    expect(custom.bytes.equals(other.bytes)).toBe(true);
  });
});

describe('duration', () => {
  test('speed 0.5 doubles and speed 2 halves the duration', async () => {
    const slow = await speakBytes({ response_format: 'pcm', speed: 0.5 });
    const fast = await speakBytes({ response_format: 'pcm', speed: 2 });
    expect(slow.bytes.length).toBe(6 * 24_000 * 2);
    expect(fast.bytes.length).toBe(1.5 * 24_000 * 2);
    const mp3 = await speakBytes({ response_format: 'mp3', speed: 0.5 });
    expect(Math.abs((await decodeAudio(mp3.bytes, 'mp3')).durationMs - 6000)).toBeLessThanOrEqual(60);
  });

  test('short inputs last 300 ms; characters are counted as code points', async () => {
    const hi = await speakBytes({ response_format: 'pcm', input: 'Hi' });
    expect(hi.bytes.length).toBe(0.3 * 24_000 * 2);
    const emoji = await speakBytes({ response_format: 'pcm', input: '👋'.repeat(10) });
    expect(emoji.bytes.length).toBe(0.6 * 24_000 * 2);
  });

  test('an inline directive counts towards the length like any text', async () => {
    const input = 'Say this. [[sim: latency_ms=1]]';
    const { bytes } = await speakBytes({ response_format: 'pcm', input });
    expect(bytes.length).toBe((input.length * 60 * 24_000 * 2) / 1000);
  });
});

describe('streaming', () => {
  test('a long input with a chunk delay arrives as many 8 KiB chunks', async () => {
    // 200 characters: 12 s of pcm, 576000 bytes, 71 chunks of at most 8 KiB.
    const input = 'a'.repeat(200);
    const started = performance.now();
    const { bytes, chunks } = await speakBytes(
      { response_format: 'pcm', input },
      { headers: { 'x-sim-chunk-delay-ms': '2' } },
    );
    expect(bytes.length).toBe(576_000);
    expect(chunks).toBeGreaterThan(20);
    expect(performance.now() - started).toBeGreaterThanOrEqual(70 * 2 - 1);
  });

  test('encoded formats stream in several chunks too', async () => {
    const { bytes, chunks } = await speakBytes(
      { response_format: 'mp3', input: 'b'.repeat(400) },
      { headers: { 'x-sim-chunk-delay-ms': '1' } },
    );
    expect(chunks).toBeGreaterThan(2);
    expect(Math.abs((await decodeAudio(bytes, 'mp3')).durationMs - 24_000)).toBeLessThanOrEqual(60);
  });

  test('drop_mid sends drop_after_chunks chunks and then fails the connection', async () => {
    const input = `${'c'.repeat(200)} [[sim: fault=drop_mid drop_after_chunks=3 chunk_delay_ms=1]]`;
    const response = await speak({ response_format: 'wav', input });
    expect(response.status).toBe(200);
    const { bytes, error: failure } = await readBytes(response);
    expect(isSocketError(failure)).toBe(true);
    expect(bytes.length).toBe(3 * SPEECH_CHUNK_BYTES);
    expect(bytes.toString('ascii', 0, 4)).toBe('RIFF');
  });

  test('drop_mid truncates an encoded stream as well', async () => {
    sim().setFaults('tts-a', { error: 'drop_mid', dropAfterChunks: 2 });
    const response = await speak({ response_format: 'flac', input: 'd'.repeat(300) }, { provider: 'tts-a' });
    expect(response.status).toBe(200);
    const { bytes, error: failure } = await readBytes(response);
    expect(isSocketError(failure)).toBe(true);
    expect(bytes.length).toBeLessThanOrEqual(2 * SPEECH_CHUNK_BYTES);
    expect(sim().calls('tts-a').at(-1)).toMatchObject({ path: PATH, fault: 'drop_mid' });
  });

  test('a client going away stops the encoder', async () => {
    const response = await postJson(
      sim().url,
      PATH,
      { model: 'tts-1', input: 'e'.repeat(2000), voice: 'alloy', response_format: 'opus' },
      { headers: { 'x-sim-chunk-delay-ms': '50' } },
    );
    const reader = response.body?.getReader();
    await reader?.read();
    expect(childFfmpegs()).toBeGreaterThan(0);
    await reader?.cancel();
    await expect.poll(childFfmpegs, { timeout: 5000 }).toBe(0);
    expect((await speak({ response_format: 'opus' })).status).toBe(200);
  });

  test('provider faults apply on the /p/<provider> path', async () => {
    sim().setFaults('tts-a', { error: 'overloaded' });
    expect((await speak({}, { provider: 'tts-a' })).status).toBe(429);
    const ok = await speak({ response_format: 'wav' }, { provider: 'tts-b' });
    expect(ok.status).toBe(200);
    await ok.arrayBuffer();
  });
});

describe('invalid requests', () => {
  test.each<[string, Record<string, unknown>]>([
    ['input', { input: undefined }],
    ['input', { input: '' }],
    ['input', { input: 42 }],
    ['input', { input: 'x'.repeat(4097) }],
    ['voice', { voice: undefined }],
    ['voice', { voice: '' }],
    ['voice', { voice: { name: 'alloy' } }],
    ['response_format', { response_format: 'ogg' }],
    ['speed', { speed: 0.1 }],
    ['speed', { speed: 5 }],
    ['speed', { speed: 'fast' }],
  ])('a bad %s is a 400', async (param, body) => {
    expect((await error(await speak(body))).param).toBe(param);
  });

  test('a missing model is a 400', async () => {
    expect((await error(await speak({ model: '' }))).message).toBe('you must provide a model parameter');
  });

  test('a malformed inline directive is a 400', async () => {
    expect((await error(await speak({ input: 'Hi [[sim: chunk_delay_ms=soon]]' }))).message).toContain(
      'chunk_delay_ms',
    );
  });

  test('without ffmpeg, compressed formats are a 400 while wav and pcm still work', async () => {
    const saved = process.env[FFMPEG_PATH_ENV];
    process.env[FFMPEG_PATH_ENV] = '/nonexistent/ffmpeg';
    try {
      const failed = await error(await speak({ response_format: 'mp3' }));
      expect(failed.param).toBe('response_format');
      expect(failed.message).toContain('no encoder');
      expect((await speakBytes({ response_format: 'wav' })).bytes.length).toBeGreaterThan(44);
    } finally {
      if (saved === undefined) delete process.env[FFMPEG_PATH_ENV];
      else process.env[FFMPEG_PATH_ENV] = saved;
    }
  });

  test('an ffmpeg that fails answers 500 without taking the simulator down', async () => {
    const saved = process.env[FFMPEG_PATH_ENV];
    // An existing binary that is not ffmpeg: `false` exits 1 without output.
    process.env[FFMPEG_PATH_ENV] = '/bin/false';
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    try {
      const response = await speak({ response_format: 'aac' });
      expect(response.status).toBe(500);
      await response.arrayBuffer();
      expect(logged).toHaveBeenCalledWith(expect.stringContaining('ffmpeg failed encoding aac'));
    } finally {
      logged.mockRestore();
      if (saved === undefined) delete process.env[FFMPEG_PATH_ENV];
      else process.env[FFMPEG_PATH_ENV] = saved;
    }
    expect((await speak({ response_format: 'aac' })).status).toBe(200);
  });
});
