import { TRANSCRIPTION_FORMATS, type TranscriptionFormat, type TranscriptionRequest } from '#core/audio.ts';
import { InvalidRequestError } from '#core/errors.ts';
import type { AudioFile } from '#core/upstream.ts';
import type { MultipartForm } from '../multipart.ts';
import { shortened } from '../validation.ts';

/** Longest `prompt` accepted; transcription models read a short context, not a document. */
const MAX_PROMPT_CHARACTERS = 4096;

const GRANULARITIES = new Set(['word', 'segment']);

/** The form fields `POST /v1/audio/transcriptions` accepts; any other is refused, naming it. */
const SINGLE_FIELDS = new Set(['model', 'language', 'prompt', 'temperature', 'response_format', 'stream']);
const GRANULARITY_FIELDS = new Set(['timestamp_granularities[]', 'timestamp_granularities']);

const invalid = (param: string, message: string, code = 'invalid_value') =>
  new InvalidRequestError(`Invalid value for '${param}': ${message}`, code, { param });

/**
 * Validates the multipart form of a transcription: the whitelist (`file`, `model`, `language`, `prompt`,
 * `temperature`, `response_format`, `timestamp_granularities[]`), one file, each other field at most once.
 */
export const parseTranscriptionRequest = (
  form: MultipartForm,
): { request: TranscriptionRequest; file: AudioFile } => {
  const values = new Map<string, string>();
  const granularities: ('word' | 'segment')[] = [];
  for (const [name, value] of form.fields) {
    if (GRANULARITY_FIELDS.has(name)) {
      if (!GRANULARITIES.has(value)) throw invalid(name, "must be 'word' or 'segment'");
      if (!granularities.includes(value as 'word')) granularities.push(value as 'word' | 'segment');
      continue;
    }
    if (name === 'file') throw invalid('file', 'must be a file upload, not a text field', 'invalid_type');
    if (!SINGLE_FIELDS.has(name)) {
      throw new InvalidRequestError(
        `Unrecognized request argument supplied: ${shortened(name)}. This endpoint accepts only documented parameters.`,
        'unsupported_parameter',
        { param: shortened(name) },
      );
    }
    if (values.has(name)) throw invalid(name, 'was given more than once');
    values.set(name, value);
  }
  for (const [name] of form.files) {
    if (name !== 'file') {
      throw new InvalidRequestError(
        `Unrecognized file field supplied: ${shortened(name)}. Send the audio as the 'file' field.`,
        'unsupported_parameter',
        { param: shortened(name) },
      );
    }
  }
  if (form.files.length > 1) throw invalid('file', 'send exactly one audio file');
  const file = form.files[0]?.[1];
  if (!file) {
    throw new InvalidRequestError("Missing required parameter: 'file'.", 'missing_required_parameter', {
      param: 'file',
    });
  }
  if (file.bytes.length === 0) throw invalid('file', 'the audio file is empty');
  const model = values.get('model');
  if (!model) {
    throw new InvalidRequestError("Missing required parameter: 'model'.", 'missing_required_parameter', {
      param: 'model',
    });
  }
  const language = values.get('language');
  if (language !== undefined && !/^[a-z]{2}$/.test(language)) {
    throw invalid('language', 'must be an ISO-639-1 code such as "en"');
  }
  const prompt = values.get('prompt');
  if (prompt !== undefined && prompt.length > MAX_PROMPT_CHARACTERS) {
    throw invalid('prompt', `must be at most ${MAX_PROMPT_CHARACTERS} characters`);
  }
  // OpenAI's SDKs may send `stream=false`; a streamed transcription (server-sent events) is not offered.
  const stream = values.get('stream');
  if (stream !== undefined && stream !== 'false') {
    throw invalid(
      'stream',
      stream === 'true'
        ? 'streamed transcriptions are not supported; omit it or send false'
        : "must be 'false'",
    );
  }
  const rawTemperature = values.get('temperature');
  let temperature: number | undefined;
  if (rawTemperature !== undefined) {
    // A decimal number as a form field carries one ("0.2", "1", ".5", "1e-1"); Number() alone would also take
    // "0x1" or "0b1" and pass the upstream a value the client never wrote.
    temperature = /^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*$/.test(rawTemperature)
      ? Number(rawTemperature)
      : Number.NaN;
    if (!(temperature >= 0 && temperature <= 1))
      throw invalid('temperature', 'must be a number between 0 and 1');
  }
  const format = values.get('response_format') ?? 'json';
  if (!Object.hasOwn(TRANSCRIPTION_FORMATS, format)) {
    throw invalid('response_format', `must be one of ${Object.keys(TRANSCRIPTION_FORMATS).join(', ')}`);
  }
  if (granularities.length > 0 && format !== 'verbose_json') {
    throw invalid('timestamp_granularities[]', "timestamps need response_format 'verbose_json'");
  }
  return {
    request: {
      model,
      language,
      prompt,
      temperature,
      response_format: format as TranscriptionFormat,
      timestamp_granularities: granularities,
    },
    file,
  };
};
