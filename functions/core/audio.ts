import { UpstreamFailure } from './fallback.ts';
import type { AudioInfo } from './ports.ts';
import { type Cue, toSrt, toVtt } from './subtitles.ts';
import type { AudioFile } from './upstream.ts';
import type { Usage } from './usage.ts';

/**
 * Speech-to-text and text-to-speech rules (OpenAI's contract; the spec gives only the rates): formats and
 * their content types, voices, and the measured units each call is billed in.
 */

/** `response_format` of a transcription, and the content type each is served with. */
export const TRANSCRIPTION_FORMATS = {
  json: 'application/json',
  verbose_json: 'application/json',
  text: 'text/plain; charset=utf-8',
  srt: 'application/x-subrip; charset=utf-8',
  vtt: 'text/vtt; charset=utf-8',
} as const;
export type TranscriptionFormat = keyof typeof TRANSCRIPTION_FORMATS;

/** Audio containers a transcription accepts (OpenAI's list), as the gateway's probe names them. */
export const TRANSCRIPTION_INPUT_FORMATS = [
  'flac',
  'mp3',
  'mp4',
  'mpeg',
  'mpga',
  'm4a',
  'ogg',
  'wav',
  'webm',
] as const;

export interface TranscriptionRequest {
  readonly model: string;
  readonly language?: string | undefined;
  readonly prompt?: string | undefined;
  readonly temperature?: number | undefined;
  readonly response_format: TranscriptionFormat;
  readonly timestamp_granularities: readonly ('word' | 'segment')[];
}

/** `response_format` of speech, and the content type of the audio bytes. */
export const SPEECH_FORMATS = {
  mp3: 'audio/mpeg',
  opus: 'audio/ogg',
  aac: 'audio/aac',
  flac: 'audio/flac',
  wav: 'audio/wav',
  // Headerless 24 kHz signed 16-bit little-endian mono, as OpenAI documents it.
  pcm: 'audio/pcm',
} as const;
export type SpeechFormat = keyof typeof SPEECH_FORMATS;

/** OpenAI's built-in voices. */
export const VOICES = [
  'alloy',
  'ash',
  'ballad',
  'coral',
  'echo',
  'fable',
  'nova',
  'onyx',
  'sage',
  'shimmer',
  'verse',
  'marin',
  'cedar',
] as const;

export const MAX_SPEECH_INPUT_CHARACTERS = 4096;

export interface SpeechRequest {
  readonly model: string;
  readonly input: string;
  readonly voice: (typeof VOICES)[number];
  readonly response_format?: SpeechFormat | undefined;
  readonly speed?: number | undefined;
  readonly instructions?: string | undefined;
}

/**
 * Characters as the speech rate counts them: Unicode code points, so an emoji or a CJK character is one
 * character whatever its UTF-16 length.
 */
export const countCharacters = (text: string): number => {
  let count = 0;
  for (const _ of text) count++;
  return count;
};

/**
 * The characters a speech call is billed on: its `input` and its `instructions` (how to speak it), both sent to the
 * upstream, which charges for both (per-token models count instructions as input text). Left out, 4,096 characters
 * of instructions rode free on a one-character input. Known exactly before the call.
 */
export const speechCharacters = (request: Pick<SpeechRequest, 'input' | 'instructions'>): number =>
  countCharacters(request.input) + countCharacters(request.instructions ?? '');

/** Speech is billed on the characters the client sent (speechCharacters), known exactly before the call. */
export const speechUsage = (characters: number): Usage => ({
  promptTokens: 0,
  completionTokens: 0,
  cachedPromptTokens: 0,
  reasoningTokens: 0,
  characters,
  source: 'measured',
});

/** Transcription is billed on the audio's duration as the gateway measured it, never as a client claims. */
export const transcriptionUsage = (audioMs: number): Usage => ({
  promptTokens: 0,
  completionTokens: 0,
  cachedPromptTokens: 0,
  reasoningTokens: 0,
  audioMs,
  source: 'measured',
});

/** The speech upstream body: the validated request, relabelled for the deployment. */
export const upstreamSpeechBody = (
  request: SpeechRequest,
  upstreamModel: string,
): Record<string, unknown> => ({
  ...request,
  model: upstreamModel,
  response_format: request.response_format ?? 'mp3',
});

/**
 * The format a transcription is asked of the upstream in: one that carries the provider's measure of the audio
 * (transcriptionBody) — plain text as JSON, subtitles as `verbose_json`, whose segments they are written from.
 */
const upstreamTranscriptionFormat = (format: TranscriptionFormat): TranscriptionFormat =>
  format === 'text' ? 'json' : format === 'srt' || format === 'vtt' ? 'verbose_json' : format;

/** The form the upstream receives besides the file: the validated fields, with its own model name. */
export const upstreamTranscriptionFields = (
  request: TranscriptionRequest,
  upstreamModel: string,
): [string, string][] => {
  const fields: [string, string][] = [['model', upstreamModel]];
  if (request.language !== undefined) fields.push(['language', request.language]);
  if (request.prompt !== undefined) fields.push(['prompt', request.prompt]);
  if (request.temperature !== undefined) fields.push(['temperature', String(request.temperature)]);
  fields.push(['response_format', upstreamTranscriptionFormat(request.response_format)]);
  for (const g of request.timestamp_granularities) fields.push(['timestamp_granularities[]', g]);
  return fields;
};

/** Media types of the containers the probe detects, for the file as it is sent upstream. */
const INPUT_MEDIA_TYPES: Readonly<Record<string, string>> = {
  flac: 'audio/flac',
  mp3: 'audio/mpeg',
  mp4: 'audio/mp4',
  m4a: 'audio/mp4',
  ogg: 'audio/ogg',
  wav: 'audio/wav',
  webm: 'audio/webm',
};

/**
 * The upload as the upstream receives it: named and typed by the format measured from its bytes, not by the
 * client's file name and content type. Providers pick a decoder by the name's extension (OpenAI refuses a file
 * named `blob`, or `upload` with no extension), and a WAV a client named `recording.mp3` is still a WAV.
 */
export const upstreamAudioFile = (file: AudioFile, format: string): AudioFile => ({
  bytes: file.bytes,
  filename: `audio.${format}`,
  contentType: INPUT_MEDIA_TYPES[format] ?? 'application/octet-stream',
});

/**
 * How far an upstream's reported duration may run past ours before it is billed instead: providers report whole
 * seconds, rounded up (OpenAI's `usage.seconds`), which is not more audio.
 */
export const REPORTED_DURATION_SLACK_MS = 1000;

/** The duration the gateway measured of an upload, and whether it is a count of the audio present. */
export type MeasuredAudio = Pick<AudioInfo, 'durationMs' | 'counted'>;

/**
 * The duration a transcription is billed on: ours, unless the upstream says it transcribed clearly more of a file
 * whose length we could only read from what the file claims (Ogg granules, WebM timestamps, an MP4 of another
 * codec than AAC): if such a file was made to read shorter than it plays, the provider's decode is the truth, and
 * what we pay for. Where ours is a count of the audio present (`counted`), nothing decodes to more: a provider's
 * longer report is its error, billed to no client (ADR 0005) but told.
 */
export const billedAudioMs = (measured: MeasuredAudio, reportedMs: number | null): number =>
  !measured.counted && reportedMs !== null && reportedMs > measured.durationMs + REPORTED_DURATION_SLACK_MS
    ? Math.ceil(reportedMs)
    : measured.durationMs;

/**
 * The audio duration an upstream's JSON transcription reports: verbose_json's exact `duration` where there is one,
 * else `usage.seconds` (whole seconds, rounded up — the rounding is not audio).
 */
const reportedMs = (body: Record<string, unknown>): number | null => {
  const usage = body.usage as { type?: unknown; seconds?: unknown } | undefined;
  const valid = (s: unknown): s is number =>
    typeof s === 'number' && Number.isFinite(s) && s >= 0 && s < 86_400;
  const seconds = valid(body.duration)
    ? body.duration
    : usage?.type === 'duration' && valid(usage.seconds)
      ? usage.seconds
      : null;
  return seconds === null ? null : seconds * 1000;
};

/** A transcription's segments as subtitle cues; null when they are not a list of timed texts. */
const cuesOf = (segments: unknown): Cue[] | null => {
  if (!Array.isArray(segments)) return null;
  const time = (t: unknown): t is number => typeof t === 'number' && Number.isFinite(t) && t >= 0;
  const cues: Cue[] = [];
  for (const segment of segments) {
    const { start, end, text } = (segment ?? {}) as { start?: unknown; end?: unknown; text?: unknown };
    if (!time(start) || !time(end) || typeof text !== 'string') return null;
    cues.push({ start, end, text });
  }
  return cues;
};

/**
 * The client's transcription body from the upstream's, and the duration it is billed on. The reply must be a
 * transcription object (else it is a protocol fault and another deployment is tried): JSON formats get `usage` as
 * we bill it; `text` — asked upstream as JSON — gets the transcript as OpenAI sends plain text, with a final
 * newline; `srt` and `vtt` — asked upstream as `verbose_json` — are written from its segments. So every reply
 * carries the provider's own measure of the audio: a subtitle document carries only its last cue's end, which
 * Whisper can place past the end of the audio, and billed where ours is not a count (a WebM from a browser) it
 * charged a few seconds of audio as tens.
 */
export const transcriptionBody = (
  format: TranscriptionFormat,
  upstream: Buffer,
  measured: MeasuredAudio,
): { body: string; audioMs: number; reportedMs: number | null } => {
  const text = upstream.toString('utf8');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new UpstreamFailure('protocol', 'upstream transcription is not JSON', { cause: error });
  }
  if (body === null || typeof body !== 'object' || typeof (body as { text?: unknown }).text !== 'string') {
    throw new UpstreamFailure('protocol', 'upstream transcription has no text');
  }
  const reported = reportedMs(body as Record<string, unknown>);
  const audioMs = billedAudioMs(measured, reported);
  if (format === 'text')
    return { body: `${(body as { text: string }).text}\n`, audioMs, reportedMs: reported };
  if (format === 'srt' || format === 'vtt') {
    const cues = cuesOf((body as { segments?: unknown }).segments);
    if (cues === null) throw new UpstreamFailure('protocol', 'upstream transcription has no timed segments');
    return { body: format === 'srt' ? toSrt(cues) : toVtt(cues), audioMs, reportedMs: reported };
  }
  return {
    body: JSON.stringify({ ...body, usage: { type: 'duration', seconds: audioMs / 1000 } }),
    audioMs,
    reportedMs: reported,
  };
};
