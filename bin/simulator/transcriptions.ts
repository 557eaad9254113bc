/**
 * `POST /v1/audio/transcriptions`: deterministic transcripts of uploaded audio in OpenAI's formats
 * (`json`, `text`, `srt`, `vtt`, `verbose_json`).
 *
 * The upload is really inspected: its duration is measured with music-metadata (and billed in
 * `usage.seconds` like `whisper-1`), and a file that is not audio gets OpenAI's 400. The words depend on
 * the file's bytes only, so the same recording always gives the same transcript.
 *
 * Inline `[[sim: ...]]` directives go in the `prompt` field, the only free text of the request.
 */
import { parseBuffer } from 'music-metadata';
import { countedDurationMs, countsDecodedAudio, liveWebmDurationMs } from '#adapters/audio-duration.ts';
import { formatOf } from '#adapters/audio-probe.ts';
import { toSrt, toVtt } from '#core/subtitles.ts';
import type { ApiCall, ApiEndpoint, ApiRejection } from '#sim/api.ts';
import { invalidRequestError, type OpenAiErrorBody } from '#sim/errors.ts';
import {
  type FaultPlan,
  FaultSyntaxError,
  parseInlineDirectives,
  type RequestDirectives,
} from '#sim/faults.ts';
import { type Exchange, sendJson, sendText, sendTruncated } from '#sim/http.ts';
import { fnv1aBytes } from '#sim/text.ts';
import { buildTranscript, type Transcript } from '#sim/transcript.ts';

/** The values of `response_format`. */
export const TRANSCRIPTION_FORMATS = ['json', 'text', 'srt', 'vtt', 'verbose_json'] as const;
/** A value of `response_format`. */
export type TranscriptionFormat = (typeof TRANSCRIPTION_FORMATS)[number];
/** The values of `timestamp_granularities[]`. */
export const TIMESTAMP_GRANULARITIES = ['word', 'segment'] as const;
type Granularity = (typeof TIMESTAMP_GRANULARITIES)[number];

/** `language` of a `verbose_json` response when the request names none. */
export const DEFAULT_TRANSCRIPTION_LANGUAGE = 'english';

/** OpenAI's 400 for an upload that is not (readable) audio, word for word. */
export const INVALID_AUDIO_FILE_ERROR: OpenAiErrorBody = invalidRequestError(
  "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', 'mp4', 'mpeg', 'mpga', 'oga', 'ogg', 'wav', 'webm']",
);

/** Content type of the `text`, `srt` and `vtt` formats, as OpenAI sends them. */
const TEXT_CONTENT_TYPE = 'text/plain; charset=utf-8';

/** A validated transcription request. */
interface TranscriptionRequest {
  format: TranscriptionFormat;
  language: string | null;
  temperature: number;
  granularities: ReadonlySet<Granularity>;
  durationSeconds: number;
  hash: number;
}

/** Creates the transcription endpoint. */
export function createTranscriptionsEndpoint(): ApiEndpoint {
  return {
    method: 'POST',
    path: '/v1/audio/transcriptions',
    parse: parseTranscription,
  };
}

async function parseTranscription(raw: Buffer, ex: Exchange): Promise<ApiCall | ApiRejection> {
  const contentType = ex.req.headers['content-type'] ?? '';
  if (!/^multipart\/form-data\s*(;|$)/i.test(contentType)) {
    return {
      status: 400,
      error: invalidRequestError(
        `Invalid Content-Type header (${contentType || 'none'}), expected multipart/form-data.`,
      ),
    };
  }
  let form: FormData;
  try {
    // The platform's (undici's) multipart parser, rather than a hand-written one.
    form = await new Response(new Uint8Array(raw), { headers: { 'content-type': contentType } }).formData();
  } catch {
    return { status: 400, error: invalidRequestError('Could not parse the multipart/form-data body.') };
  }

  const model = form.get('model');
  if (typeof model !== 'string' || model === '') {
    return { status: 400, error: invalidRequestError('you must provide a model parameter') };
  }
  const reject = (message: string, param: string | null, code: string | null = null): ApiRejection => ({
    status: 400,
    model,
    error: invalidRequestError(message, param, code),
  });

  const file = form.get('file');
  if (file === null)
    return reject("Missing required parameter: 'file'.", 'file', 'missing_required_parameter');
  if (typeof file === 'string') return reject("'file' must be a file upload, not a text field.", 'file');

  const format = form.get('response_format') ?? 'json';
  if (!isOneOf(TRANSCRIPTION_FORMATS, format)) {
    return reject(
      `Invalid value: ${JSON.stringify(format)}. Supported values are: ${quoteList(TRANSCRIPTION_FORMATS)}.`,
      'response_format',
      'invalid_value',
    );
  }
  const temperatureField = form.get('temperature');
  const temperature = typeof temperatureField === 'string' ? Number(temperatureField) : 0;
  if (temperatureField !== null && (temperatureField === '' || !(temperature >= 0 && temperature <= 1))) {
    return reject(
      `Invalid 'temperature': ${JSON.stringify(temperatureField)}. Expected a number from 0 to 1.`,
      'temperature',
    );
  }
  const granularities = new Set<Granularity>();
  for (const value of [
    ...form.getAll('timestamp_granularities[]'),
    ...form.getAll('timestamp_granularities'),
  ]) {
    if (!isOneOf(TIMESTAMP_GRANULARITIES, value)) {
      return reject(
        `Invalid value: ${JSON.stringify(typeof value === 'string' ? value : 'file')}. Supported values are: ` +
          `${quoteList(TIMESTAMP_GRANULARITIES)}.`,
        'timestamp_granularities',
        'invalid_value',
      );
    }
    granularities.add(value);
  }
  const language = form.get('language');
  const prompt = form.get('prompt');

  let directives: RequestDirectives | null;
  try {
    directives = typeof prompt === 'string' ? parseInlineDirectives(prompt) : null;
  } catch (error) {
    if (!(error instanceof FaultSyntaxError)) throw error;
    return reject(error.message, null);
  }

  const bytes = new Uint8Array(await file.arrayBuffer());
  const durationSeconds = await measureDuration(bytes, file);
  if (durationSeconds === null) return { status: 400, model, error: INVALID_AUDIO_FILE_ERROR };

  const request: TranscriptionRequest = {
    format,
    language: typeof language === 'string' && language !== '' ? language : null,
    temperature,
    granularities,
    durationSeconds,
    hash: fnv1aBytes(bytes),
  };
  return {
    model,
    stream: false,
    directives,
    body: describeForm(form),
    respond: (ex, plan) => sendTranscription(ex, request, plan),
  };
}

/**
 * Duration of an audio file in seconds, or null when it is not audio music-metadata can measure (or
 * lasts no time at all). The content decides, as providers sniff it: a declared type that misleads (a wrong
 * content type is common) would have a WAV read as MPEG. The declared type and name are tried only when the
 * content alone is not recognised.
 */
export async function measureDuration(
  bytes: Uint8Array,
  file: { name?: string; type?: string },
): Promise<number | null> {
  const hinted = {
    size: bytes.length,
    ...(file.type ? { mimeType: file.type } : {}),
    ...(file.name ? { path: file.name } : {}),
  };
  // A provider transcribes, and reports, what its decoder plays, whatever a header claims (or lacks, in a recording
  // made to a pipe): where the gateway counts decoded audio, that count is the duration; elsewhere the longer of
  // the count and the header.
  for (const fileInfo of [{ size: bytes.length }, hinted]) {
    try {
      const { format } = await parseBuffer(bytes, fileInfo, { duration: true, skipCovers: true });
      const name = formatOf(format.container);
      const count = name ? countedDurationMs(name, bytes) : null;
      const duration =
        name && count !== null && countsDecodedAudio(name)
          ? count / 1000
          : Math.max(format.duration ?? 0, (count ?? 0) / 1000);
      if (Number.isFinite(duration) && duration > 0) return duration;
    } catch {
      // Not audio in this format; try sniffing, or give up.
    }
  }
  // A live WebM recording (clusters of unknown size), which music-metadata does not read.
  const live = liveWebmDurationMs(bytes);
  return live !== null && live > 0 ? live / 1000 : null;
}

function sendTranscription(ex: Exchange, request: TranscriptionRequest, plan: FaultPlan): void {
  const transcript = buildTranscript(request.hash, request.durationSeconds, request.temperature);
  const usage = { type: 'duration', seconds: Math.ceil(request.durationSeconds) };
  let text: string;
  let contentType = TEXT_CONTENT_TYPE;
  switch (request.format) {
    case 'json':
      contentType = 'application/json';
      text = JSON.stringify({ text: transcript.text, ...(plan.omitUsage ? {} : { usage }) });
      break;
    case 'verbose_json':
      contentType = 'application/json';
      text = JSON.stringify(verboseJson(request, transcript, plan.omitUsage ? null : usage));
      break;
    case 'text':
      text = `${transcript.text}\n`;
      break;
    case 'srt':
      text = toSrt(transcript.segments);
      break;
    case 'vtt':
      text = toVtt(transcript.segments);
      break;
  }
  if (plan.error === 'drop_mid') sendTruncated(ex, text, contentType);
  else if (contentType === 'application/json') sendJson(ex, 200, text);
  else sendText(ex, 200, text, contentType);
}

function verboseJson(request: TranscriptionRequest, transcript: Transcript, usage: object | null): object {
  const { granularities } = request;
  return {
    task: 'transcribe',
    language: request.language ?? DEFAULT_TRANSCRIPTION_LANGUAGE,
    duration: Math.round(request.durationSeconds * 100) / 100,
    text: transcript.text,
    ...(granularities.size === 0 || granularities.has('segment') ? { segments: transcript.segments } : {}),
    ...(granularities.has('word') ? { words: transcript.words } : {}),
    ...(usage === null ? {} : { usage }),
  };
}

/**
 * The form as the call log keeps it: text fields as strings (repeated ones as arrays) and files as
 * their name, type and size, so a test can see what a gateway forwarded without holding the audio.
 */
function describeForm(form: FormData): Record<string, unknown> {
  const described: Record<string, unknown> = {};
  for (const [name, value] of form) {
    const entry =
      typeof value === 'string' ? value : { filename: value.name, type: value.type, size: value.size };
    const previous = described[name];
    if (previous === undefined) described[name] = entry;
    else described[name] = Array.isArray(previous) ? [...previous, entry] : [previous, entry];
  }
  return described;
}

function isOneOf<T extends string>(values: readonly T[], value: unknown): value is T {
  return typeof value === 'string' && (values as readonly string[]).includes(value);
}

function quoteList(values: readonly string[]): string {
  return values.map((v) => `'${v}'`).join(', ');
}
