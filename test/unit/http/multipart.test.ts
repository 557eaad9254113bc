import { describe, expect, it } from 'vitest';
import { multipartBody } from '#adapters/upstream/multipart.ts';
import { InvalidRequestError } from '#core/errors.ts';
import type { AudioFile } from '#core/upstream.ts';
import { type MultipartForm, parseMultipart } from '#http/multipart.ts';
import { parseTranscriptionRequest } from '#http/schemas/transcriptions.ts';

const file = {
  name: 'file',
  filename: 'a "quoted"\r\nname.wav',
  contentType: 'audio/wav',
  bytes: new Uint8Array([0, 1, 2, 255]),
};

describe('multipart', () => {
  it('round-trips fields and a binary file through our encoder and the platform parser', async () => {
    const { body, contentType } = multipartBody(
      [
        ['model', 'svc-stt'],
        ['timestamp_granularities[]', 'word'],
        ['timestamp_granularities[]', 'segment'],
        ['prompt', 'línea 1\r\nline 2'],
      ],
      file,
    );
    const form = await parseMultipart(body, contentType);
    expect(form.fields).toEqual([
      ['model', 'svc-stt'],
      ['timestamp_granularities[]', 'word'],
      ['timestamp_granularities[]', 'segment'],
      ['prompt', 'línea 1\r\nline 2'],
    ]);
    expect(form.files).toHaveLength(1);
    expect(Array.from(form.files[0]?.[1].bytes ?? [])).toEqual([0, 1, 2, 255]);
    expect(form.files[0]?.[1].contentType).toBe('audio/wav');
  });

  it('refuses a body that is not multipart/form-data', async () => {
    await expect(parseMultipart(Buffer.from('{}'), 'application/json')).rejects.toMatchObject({
      code: 'invalid_content_type',
    });
    await expect(
      parseMultipart(Buffer.from('garbage'), 'multipart/form-data; boundary=xyz'),
    ).rejects.toBeInstanceOf(InvalidRequestError);
  });

  it('says what is wrong with a multipart/form-data type that has no boundary', async () => {
    // A client that sets the header by hand drops the boundary its HTTP library would have added.
    await expect(parseMultipart(Buffer.from('--zz--'), 'multipart/form-data')).rejects.toMatchObject({
      code: 'invalid_content_type',
      message: expect.stringContaining('lacks its boundary parameter'),
    });
  });
});

describe('parseTranscriptionRequest', () => {
  const audio: AudioFile = { filename: 'a.wav', contentType: 'audio/wav', bytes: new Uint8Array([1]) };
  const form = (
    fields: (readonly [string, string])[],
    files: (readonly [string, AudioFile])[] = [['file', audio]],
  ): MultipartForm => ({ fields, files });

  it('reads the whitelisted fields, with json as the default format', () => {
    const parsed = parseTranscriptionRequest(
      form([
        ['model', 'svc-stt'],
        ['temperature', '0.5'],
        ['language', 'fr'],
      ]),
    );
    expect(parsed.request).toMatchObject({
      model: 'svc-stt',
      temperature: 0.5,
      language: 'fr',
      response_format: 'json',
    });
    expect(parsed.file.filename).toBe('a.wav');
  });

  it.each<[(readonly [string, string])[], string]>([
    [
      [
        ['model', 'svc-stt'],
        ['model', 'x'],
      ],
      'model',
    ],
    [[['temperature', '0.5']], 'model'],
    [
      [
        ['model', 'svc-stt'],
        ['temperature', ''],
      ],
      'temperature',
    ],
    [
      [
        ['model', 'svc-stt'],
        ['file', 'not a file'],
      ],
      'file',
    ],
    [
      [
        ['model', 'svc-stt'],
        ['include[]', 'logprobs'],
      ],
      'include[]',
    ],
    [
      [
        ['model', 'svc-stt'],
        ['timestamp_granularities[]', 'char'],
      ],
      'timestamp_granularities[]',
    ],
  ])('refuses %j naming %s', (fields, param) => {
    expect(() => parseTranscriptionRequest(form(fields))).toThrow(expect.objectContaining({ param }));
  });

  it('reads temperature as a decimal number only', () => {
    const temperature = (value: string) =>
      parseTranscriptionRequest(
        form([
          ['model', 'svc-stt'],
          ['temperature', value],
        ]),
      ).request.temperature;
    expect([' 0.2', '1', '.5', '0', '1e-1', '+0.3'].map(temperature)).toEqual([0.2, 1, 0.5, 0, 0.1, 0.3]);
    for (const value of ['0x1', '0b1', '0o1', 'Infinity', '1.2.3', '1,5', 'NaN', '1.1']) {
      expect(() => temperature(value), value).toThrow(
        expect.objectContaining({ param: 'temperature', code: 'invalid_value' }),
      );
    }
  });

  it('requires exactly one non-empty file', () => {
    expect(() => parseTranscriptionRequest(form([['model', 'svc-stt']], []))).toThrow(
      expect.objectContaining({ code: 'missing_required_parameter', param: 'file' }),
    );
    expect(() =>
      parseTranscriptionRequest(
        form([['model', 'svc-stt']], [['file', { ...audio, bytes: new Uint8Array() }]]),
      ),
    ).toThrow(expect.objectContaining({ param: 'file' }));
  });
});
