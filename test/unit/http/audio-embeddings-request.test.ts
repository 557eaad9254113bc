import { describe, expect, it } from 'vitest';
import { parseEmbeddingsRequest } from '#http/schemas/embeddings.ts';
import { parseSpeechRequest } from '#http/schemas/speech.ts';
import { parseTranscriptionRequest } from '#http/schemas/transcriptions.ts';
import { refusal as rejection } from '#test/refusal.ts';

describe('a missing parameter is named as missing, whatever kind of check it fails', () => {
  it.each([
    ['speech voice (an enum)', parseSpeechRequest, { model: 'svc-tts', input: 'hi' }, 'voice'],
    [
      'speech input (a string with a length check)',
      parseSpeechRequest,
      { model: 'svc-tts', voice: 'alloy' },
      'input',
    ],
    ['embeddings input (a union)', parseEmbeddingsRequest, { model: 'svc-embed' }, 'input'],
  ])('%s', (_name, parse, body, param) => {
    expect(rejection(parse, body)).toMatchObject({
      code: 'missing_required_parameter',
      param,
      message: `Missing required parameter: '${param}'.`,
    });
  });

  it('while a present value of the wrong kind is invalid, not missing', () => {
    expect(rejection(parseSpeechRequest, { model: 'svc-tts', input: 'hi', voice: 'nobody' })).toMatchObject({
      code: 'invalid_value',
      param: 'voice',
    });
    expect(rejection(parseEmbeddingsRequest, { model: 'svc-embed', input: 5 })).toMatchObject({
      code: 'invalid_value',
      param: 'input',
    });
    expect(rejection(parseSpeechRequest, { model: 'svc-tts', input: 5, voice: 'alloy' })).toMatchObject({
      code: 'invalid_type',
      param: 'input',
    });
  });
});

describe('what OpenAI also sends to the audio and embeddings endpoints', () => {
  const speech = { model: 'svc-tts', input: 'hi', voice: 'alloy' };

  it("takes speech's stream_format 'audio' (how it is answered anyway) and sends it no further", () => {
    expect(parseSpeechRequest({ ...speech, stream_format: 'audio' })).not.toHaveProperty('stream_format');
    expect(rejection(parseSpeechRequest, { ...speech, stream_format: 'sse' })).toMatchObject({
      param: 'stream_format',
      message: expect.stringContaining("only 'audio' is supported"),
    });
  });

  it('says a custom voice is not supported, rather than only listing the voices', () => {
    expect(rejection(parseSpeechRequest, { ...speech, voice: { id: 'voice_1234' } })).toMatchObject({
      param: 'voice',
      message: expect.stringContaining('custom voices are not supported'),
    });
  });

  it.each([
    ['speech', parseSpeechRequest, speech],
    ['embeddings', parseEmbeddingsRequest, { model: 'svc-embed', input: 'hi' }],
  ])('%s: refuses an unknown parameter even as null, naming it', (_, parse, body) => {
    expect(rejection(parse, { ...body, not_a_param: null })).toMatchObject({
      code: 'unsupported_parameter',
      param: 'not_a_param',
    });
  });

  const transcription = (fields: [string, string][]) =>
    parseTranscriptionRequest({
      fields: [['model', 'svc-stt'], ...fields],
      files: [['file', { bytes: new Uint8Array([1, 2, 3]), filename: 'a.wav', contentType: 'audio/wav' }]],
    });

  it('takes stream=false on a transcription (SDKs send it) and refuses a streamed one, saying so', () => {
    expect(() => transcription([['stream', 'false']])).not.toThrow();
    expect(() => transcription([['stream', 'true']])).toThrow('streamed transcriptions are not supported');
  });

  it('names an unknown form field cut short, as the JSON endpoints do: the answer stays small', () => {
    const name = 'x'.repeat(3_000_000);
    let error: unknown;
    try {
      transcription([[name, 'v']]);
    } catch (e) {
      error = e;
    }
    expect(error).toMatchObject({ code: 'unsupported_parameter', param: `${'x'.repeat(64)}…` });
    expect(JSON.stringify(error).length).toBeLessThan(1_000);
    expect(() =>
      parseTranscriptionRequest({
        fields: [['model', 'svc-stt']],
        files: [
          ['file', { bytes: new Uint8Array([1]), filename: 'a.wav', contentType: 'audio/wav' }],
          [name, { bytes: new Uint8Array([1]), filename: 'b.wav', contentType: 'audio/wav' }],
        ],
      }),
    ).toThrow(expect.objectContaining({ param: `${'x'.repeat(64)}…` }));
  });
});
