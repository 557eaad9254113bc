import { describe, expect, it } from 'vitest';
import { parseEmbeddingsRequest } from '#http/schemas/embeddings.ts';
import { parseSpeechRequest } from '#http/schemas/speech.ts';
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
