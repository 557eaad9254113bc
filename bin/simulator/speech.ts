/**
 * `POST /v1/audio/speech`: text to speech in every OpenAI output format, streamed as it is produced.
 *
 * The "speech" is a quiet tone whose pitch depends on the voice and whose length follows the input
 * ({@link speechDurationMs}), so a test can check that a gateway relayed the whole stream by decoding it.
 * `wav` and `pcm` are written directly; `mp3`, `opus`, `aac` and `flac` are encoded by a real ffmpeg and
 * relayed chunk by chunk as it produces them, with no content-length, like OpenAI's chunked responses.
 *
 * Inline `[[sim: ...]]` directives go in `input` (and, being text, count towards the duration).
 */
import { type ApiCall, type ApiEndpoint, type ApiRejection, parseModelRequest } from '#sim/api.ts';
import { BYTES_PER_SAMPLE, SPEECH_SAMPLE_RATE, synthesizeTone, wavHeader } from '#sim/audio.ts';
import { invalidRequestError, SERVER_ERROR } from '#sim/errors.ts';
import {
  type FaultPlan,
  FaultSyntaxError,
  parseInlineDirectives,
  type RequestDirectives,
} from '#sim/faults.ts';
import { type EncodedFormat, findFfmpeg, spawnEncoder } from '#sim/ffmpeg.ts';
import { type Exchange, sendJson, writeChunk } from '#sim/http.ts';
import { fnv1a } from '#sim/text.ts';

/** The values of `response_format`. */
export const SPEECH_FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
/** A value of `response_format`. */
export type SpeechFormat = (typeof SPEECH_FORMATS)[number];

/** Content type of each format, as OpenAI sends them. */
export const SPEECH_CONTENT_TYPES: Readonly<Record<SpeechFormat, string>> = Object.freeze({
  mp3: 'audio/mpeg',
  opus: 'audio/ogg',
  aac: 'audio/aac',
  flac: 'audio/flac',
  wav: 'audio/wav',
  pcm: 'audio/pcm',
});

/** Largest body write; `drop_after_chunks` and `chunk_delay_ms` count and space writes of this size. */
export const SPEECH_CHUNK_BYTES = 8 * 1024;
/** Longest `input`, in characters, as on OpenAI. */
export const MAX_SPEECH_INPUT_CHARS = 4096;
/** Milliseconds of audio per input character at speed 1. */
export const MS_PER_CHARACTER = 60;
/** Shortest audio at speed 1, so even "Hi" sounds like something. */
export const MIN_SPEECH_MS = 300;
export const MIN_SPEED = 0.25;
export const MAX_SPEED = 4;

/**
 * Encoders add silence that the streamed containers cannot flag for trimming: AAC's 1024 priming
 * samples (ADTS has no field for them) and LAME's padding (its Xing frame is only completed on a
 * seekable output). Leaving that many samples out of the input keeps the decoded length within one
 * codec frame (+0..43 ms) of the nominal duration, instead of 50 to 85 ms over it.
 */
const ENCODER_PADDING_SAMPLES: Readonly<Record<EncodedFormat, number>> = {
  mp3: 1152,
  aac: 1024,
  opus: 0,
  flac: 0,
};

/** Audio length for `input` at `speed`: 60 ms per character (300 ms at least), divided by the speed. */
export function speechDurationMs(input: string, speed: number): number {
  return Math.round(Math.max(MIN_SPEECH_MS, MS_PER_CHARACTER * [...input].length) / speed);
}

/** Pitch of a voice: 200 to 599 Hz, from the voice name's hash, so voices sound different. */
export function voiceFrequencyHz(voice: string): number {
  return 200 + (fnv1a(voice) % 400);
}

interface SpeechRequest {
  format: SpeechFormat;
  durationMs: number;
  frequencyHz: number;
  /** The encoder binary, for the compressed formats. */
  ffmpeg: string | null;
}

/** Creates the speech endpoint. */
export function createSpeechEndpoint(): ApiEndpoint {
  return {
    method: 'POST',
    path: '/v1/audio/speech',
    parse(raw: Buffer): ApiCall | ApiRejection {
      const parsed = parseModelRequest(raw);
      if ('error' in parsed) return parsed;
      const { body, model } = parsed;
      const reject = (message: string, param: string | null, code: string | null = null): ApiRejection => ({
        status: 400,
        model,
        error: invalidRequestError(message, param, code),
      });
      const missing = (param: string): ApiRejection =>
        reject(`Missing required parameter: '${param}'.`, param, 'missing_required_parameter');

      const { input } = body;
      if (input === undefined || input === null) return missing('input');
      if (typeof input !== 'string') return reject("Invalid type for 'input': expected a string.", 'input');
      if (input === '') return reject("'input' must not be empty.", 'input');
      const length = [...input].length;
      if (length > MAX_SPEECH_INPUT_CHARS) {
        return reject(
          `Invalid 'input': string too long. Expected a string with maximum length ${MAX_SPEECH_INPUT_CHARS}, ` +
            `but got a string with length ${length} instead.`,
          'input',
          'string_above_max_length',
        );
      }
      const voice = voiceName(body.voice);
      if (body.voice === undefined || body.voice === null) return missing('voice');
      if (voice === null) {
        return reject("Invalid 'voice': expected a voice name or an object with a string 'id'.", 'voice');
      }
      const format = body.response_format ?? 'mp3';
      if (!isSpeechFormat(format)) {
        return reject(
          `Invalid value: ${JSON.stringify(format)}. Supported values are: ` +
            `${SPEECH_FORMATS.map((f) => `'${f}'`).join(', ')}.`,
          'response_format',
          'invalid_value',
        );
      }
      const speed = body.speed ?? 1;
      if (typeof speed !== 'number' || !(speed >= MIN_SPEED && speed <= MAX_SPEED)) {
        return reject(
          `Invalid 'speed': ${JSON.stringify(speed)}. Expected a number from ${MIN_SPEED} to ${MAX_SPEED}.`,
          'speed',
        );
      }
      const ffmpeg = format === 'wav' || format === 'pcm' ? null : findFfmpeg();
      if (format !== 'wav' && format !== 'pcm' && ffmpeg === null) {
        return reject(
          `The upstream simulator has no encoder for response_format '${format}' (ffmpeg not found; set ` +
            "FFMPEG_PATH). Use 'wav' or 'pcm'.",
          'response_format',
        );
      }

      let directives: RequestDirectives | null;
      try {
        directives = parseInlineDirectives(input);
      } catch (error) {
        if (!(error instanceof FaultSyntaxError)) throw error;
        return reject(error.message, null);
      }
      const request: SpeechRequest = {
        format,
        durationMs: speechDurationMs(input, speed),
        frequencyHz: voiceFrequencyHz(voice),
        ffmpeg,
      };
      return {
        model,
        stream: false,
        directives,
        body,
        respond: (ex, plan) => sendSpeech(ex, request, plan),
      };
    },
  };
}

async function sendSpeech(ex: Exchange, request: SpeechRequest, plan: FaultPlan): Promise<void> {
  const pcm = synthesizeTone({
    durationMs: request.durationMs,
    sampleRate: SPEECH_SAMPLE_RATE,
    frequencyHz: request.frequencyHz,
  });
  const body = new ChunkedBody(ex, SPEECH_CONTENT_TYPES[request.format], plan);
  const { format, ffmpeg } = request;
  if (format === 'wav' || format === 'pcm') {
    const bytes =
      format === 'wav'
        ? Buffer.concat([wavHeader(pcm.length, { sampleRate: SPEECH_SAMPLE_RATE, channels: 1 }), pcm])
        : pcm;
    if (await body.write(bytes)) body.end();
    return;
  }
  if (ffmpeg !== null) await sendEncoded(ex, body, ffmpeg, format, pcm);
}

/**
 * Encodes `pcm` with ffmpeg and relays its output as it arrives. The encoder is killed if the client goes
 * away (or a `drop_mid` ends the response), and a failing encoder costs the request, never the process:
 * a 500 if nothing was sent yet, a dropped connection otherwise.
 */
async function sendEncoded(
  ex: Exchange,
  body: ChunkedBody,
  ffmpeg: string,
  format: EncodedFormat,
  pcm: Buffer,
): Promise<void> {
  const encoder = spawnEncoder(ffmpeg, format, SPEECH_SAMPLE_RATE);
  const exited = new Promise<number | string>((resolve) => {
    encoder.once('error', (error) => resolve(error.message));
    encoder.once('close', (code, signal) => resolve(code ?? signal ?? 'unknown'));
  });
  let stderr = '';
  encoder.stderr.setEncoding('utf8');
  encoder.stderr.on('data', (text: string) => {
    if (stderr.length < 4096) stderr += text;
  });
  // ffmpeg exiting early makes writes to its stdin fail with EPIPE; the exit status reports the cause.
  encoder.stdin.on('error', () => {});
  let stopped = false;
  const stop = (): void => {
    stopped = true;
    if (encoder.exitCode === null && encoder.signalCode === null) encoder.kill('SIGKILL');
  };
  ex.res.once('close', stop);
  try {
    const padding = ENCODER_PADDING_SAMPLES[format] * BYTES_PER_SAMPLE;
    encoder.stdin.end(pcm.subarray(0, Math.max(BYTES_PER_SAMPLE, pcm.length - padding)));
    try {
      for await (const chunk of encoder.stdout) {
        if (!(await body.write(chunk as Buffer))) {
          stop();
          return;
        }
      }
    } catch {
      // stdout failed (e.g. the process could not start); the exit status below says why.
    }
    const status = await exited;
    if (status === 0) {
      body.end();
      return;
    }
    if (stopped) return;
    console.error(`upstream simulator: ffmpeg failed encoding ${format} (${status}): ${stderr.trim()}`);
    if (body.started) ex.drop();
    else sendJson(ex, 500, SERVER_ERROR);
  } finally {
    ex.res.off('close', stop);
  }
}

/**
 * A chunked 200 response written in pieces of at most {@link SPEECH_CHUNK_BYTES}, spaced by
 * `plan.chunkDelayMs`; under `drop_mid` the connection is dropped after `plan.dropAfterChunks` pieces
 * (or at the end, if the body is shorter). Headers go out with the first piece, so an encoder that fails
 * before producing anything can still be answered with a 500.
 */
class ChunkedBody {
  readonly #ex: Exchange;
  readonly #contentType: string;
  readonly #delayMs: number;
  readonly #dropAfter: number | null;
  #sent = 0;
  #started = false;

  constructor(ex: Exchange, contentType: string, plan: FaultPlan) {
    this.#ex = ex;
    this.#contentType = contentType;
    this.#delayMs = plan.chunkDelayMs;
    this.#dropAfter = plan.error === 'drop_mid' ? plan.dropAfterChunks : null;
  }

  /** Whether the status line has been sent. */
  get started(): boolean {
    return this.#started;
  }

  /** Writes `bytes` in pieces; resolves false once the response is over (dropped or client gone). */
  async write(bytes: Uint8Array): Promise<boolean> {
    this.#start();
    for (let offset = 0; offset < bytes.length; offset += SPEECH_CHUNK_BYTES) {
      if (this.#dropAfter !== null && this.#sent >= this.#dropAfter) {
        this.#ex.drop();
        return false;
      }
      if (this.#sent > 0 && this.#delayMs > 0 && !(await this.#ex.sleep(this.#delayMs))) return false;
      if (!(await writeChunk(this.#ex, bytes.subarray(offset, offset + SPEECH_CHUNK_BYTES)))) return false;
      this.#sent++;
    }
    return true;
  }

  /** Completes the response, or drops it under `drop_mid` so the client never sees a complete body. */
  end(): void {
    this.#start();
    if (this.#dropAfter !== null) this.#ex.drop();
    else this.#ex.res.end();
  }

  #start(): void {
    if (this.#started) return;
    this.#started = true;
    // No content-length: node:http then sends `Transfer-Encoding: chunked`.
    this.#ex.res.writeHead(200, { 'content-type': this.#contentType });
    if (this.#dropAfter === 0) this.#ex.res.flushHeaders();
  }
}

/** A voice name, or the `id` of a custom voice object; null when neither. */
function voiceName(voice: unknown): string | null {
  if (typeof voice === 'string') return voice === '' ? null : voice;
  if (isRecord(voice) && typeof voice.id === 'string' && voice.id !== '') return voice.id;
  return null;
}

function isSpeechFormat(value: unknown): value is SpeechFormat {
  return typeof value === 'string' && (SPEECH_FORMATS as readonly string[]).includes(value);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
