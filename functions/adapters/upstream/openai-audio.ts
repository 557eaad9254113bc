import { UpstreamFailure } from '#core/fallback.ts';
import type {
  AudioStream,
  SpeechCall,
  SpeechProvider,
  TranscriptionCall,
  TranscriptionProvider,
  TranscriptionResult,
} from '#core/upstream.ts';
import { statusFailure, transportFailure } from './http.ts';
import { multipartBody } from './multipart.ts';
import { type OpenAiHttp, openWithinFirstByte, readAll } from './openai-http.ts';

/** Media types no audio is sent as. */
const NOT_AUDIO = /^\s*(?:text\/|application\/(?:[\w.+-]*\+)?(?:json|xml)\b|application\/xhtml)/i;

const headerText = (value: string | string[] | undefined): string =>
  (Array.isArray(value) ? value[0] : value) ?? '';

/** A transcript of the longest accepted upload, in the most verbose format, is far below this. */
const MAX_TRANSCRIPT_BYTES = 16 * 1024 * 1024;

/** `POST /audio/transcriptions`: the upload re-sent as multipart with the upstream's model name. */
export class OpenAiCompatibleTranscriptions implements TranscriptionProvider {
  readonly #http: OpenAiHttp;

  constructor(http: OpenAiHttp) {
    this.#http = http;
  }

  async transcribe(call: TranscriptionCall): Promise<TranscriptionResult> {
    const { body, contentType } = multipartBody(call.fields, { name: 'file', ...call.file });
    const response = await this.#http.post(call, {
      path: '/audio/transcriptions',
      body,
      contentType,
      accept: 'application/json, text/plain, */*',
      headersTimeoutMs: this.#http.completionTimeoutMs(call.deployment),
      wholeBodyLimitBytes: MAX_TRANSCRIPT_BYTES,
    });
    if (response.statusCode !== 200) throw await statusFailure(response);
    return { body: await readAll(response, MAX_TRANSCRIPT_BYTES) };
  }
}

/**
 * `POST /audio/speech`: resolves once the first audio bytes are in hand, so any failure before that — an
 * error status, a dropped connection, a silent upstream — can still fall back to another deployment.
 */
export class OpenAiCompatibleSpeech implements SpeechProvider {
  readonly #http: OpenAiHttp;

  constructor(http: OpenAiHttp) {
    this.#http = http;
  }

  speak(call: SpeechCall): Promise<AudioStream> {
    const firstByteMs = this.#http.firstByteTimeoutMs(call.deployment);
    return openWithinFirstByte(call, firstByteMs, 'audio', async (abort, release) => {
      const response = await this.#http.post(
        { ...call, signal: abort.signal },
        {
          path: '/audio/speech',
          body: JSON.stringify(call.body),
          contentType: 'application/json',
          accept: 'audio/*, application/octet-stream',
          headersTimeoutMs: firstByteMs,
        },
      );
      if (response.statusCode !== 200) throw await statusFailure(response);
      // Relayed to the client as audio and billed, so a 200 that says it is a document (a JSON error, a proxy's
      // HTML page) is a faulty reply and the next deployment is tried. Audio's own types vary by provider
      // (audio/*, application/octet-stream, application/ogg): only what is plainly not audio is refused.
      const type = headerText(response.headers['content-type']);
      if (NOT_AUDIO.test(type)) {
        response.body.destroy();
        throw new UpstreamFailure('protocol', `upstream speech is ${type.split(';')[0]?.trim()}, not audio`);
      }
      const chunks = response.body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      const first = await chunks.next();
      if (first.done) throw new UpstreamFailure('dropped', 'upstream audio ended before its first byte');
      return new RelayedAudio(first.value, chunks, abort, release);
    });
  }
}

/** The upstream's audio after its first chunk; a transport error part-way is thrown to the relay. */
class RelayedAudio implements AudioStream {
  readonly #first: Buffer;
  readonly #rest: AsyncIterator<Buffer>;
  readonly #abort: AbortController;
  readonly #onEnd: () => void;
  #finished = false;

  constructor(first: Buffer, rest: AsyncIterator<Buffer>, abort: AbortController, onEnd: () => void) {
    this.#first = first;
    this.#rest = rest;
    this.#abort = abort;
    this.#onEnd = onEnd;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array, void, undefined> {
    try {
      yield this.#first;
      for (;;) {
        let next: IteratorResult<Buffer>;
        try {
          next = await this.#rest.next();
        } catch (error) {
          throw transportFailure(error);
        }
        if (next.done) {
          this.#finished = true;
          this.#onEnd();
          return;
        }
        yield next.value;
      }
    } finally {
      this.close();
    }
  }

  close(): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#onEnd();
    this.#abort.abort();
  }
}
