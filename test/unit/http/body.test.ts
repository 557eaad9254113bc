import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { bodyBytes, jsonBody } from '#http/lambda.ts';

/** A Function URL event carrying `body` (base64, as a Function URL passes binary and compressed bodies). */
const event = (body: Buffer, headers: Record<string, string> = {}): APIGatewayProxyEventV2 =>
  ({
    headers: { 'content-type': 'application/json', ...headers },
    body: body.toString('base64'),
    isBase64Encoded: true,
  }) as unknown as APIGatewayProxyEventV2;

const refusal = (fn: () => unknown) => {
  try {
    fn();
  } catch (error) {
    const e = error as { status: number; code: string; message: string };
    return { status: e.status, code: e.code, message: e.message };
  }
  throw new Error('expected a refusal');
};

const text = Buffer.from('{"model":"m","input":"héllo"}');

describe('bodyBytes and jsonBody: Content-Encoding', () => {
  it.each([
    ['gzip', gzipSync],
    ['x-gzip', gzipSync],
    ['GZip', gzipSync],
    ['deflate', deflateSync],
    ['br', brotliCompressSync],
  ] as const)('decodes %s', (encoding, compress) => {
    const compressed = event(compress(text), { 'content-encoding': encoding });
    expect(bodyBytes(compressed, 1024)).toEqual(text);
    expect(jsonBody(compressed, 1024)).toEqual({ model: 'm', input: 'héllo' });
  });

  it('takes identity, an empty header or none as uncompressed', () => {
    const none: Record<string, string>[] = [
      {},
      { 'content-encoding': 'identity' },
      { 'content-encoding': ' ' },
    ];
    for (const headers of none) {
      expect(bodyBytes(event(text, headers), 1024)).toEqual(text);
    }
  });

  it('refuses a coding it does not know with 400, naming it', () => {
    expect(refusal(() => bodyBytes(event(text, { 'content-encoding': 'zstd' }), 1024))).toMatchObject({
      status: 400,
      code: 'unsupported_content_encoding',
      message: expect.stringContaining('"zstd"'),
    });
    // Stacked codings are not supported either (no client of an inference API sends them).
    expect(
      refusal(() => bodyBytes(event(gzipSync(gzipSync(text)), { 'content-encoding': 'gzip, gzip' }), 1024)),
    ).toMatchObject({ status: 400, code: 'unsupported_content_encoding' });
  });

  it('refuses bytes that are not what the coding says with 400', () => {
    expect(refusal(() => bodyBytes(event(text, { 'content-encoding': 'gzip' }), 1024))).toMatchObject({
      status: 400,
      code: 'invalid_content_encoding',
    });
    const truncated = gzipSync(text).subarray(0, 12);
    expect(refusal(() => jsonBody(event(truncated, { 'content-encoding': 'gzip' }), 1024))).toMatchObject({
      status: 400,
      code: 'invalid_content_encoding',
    });
  });

  it.each([
    ['gzip', gzipSync],
    ['deflate', deflateSync],
    ['br', brotliCompressSync],
  ] as const)(
    'holds the limit for what a %s body decodes to, not only for the bytes sent',
    (encoding, compress) => {
      const bomb = compress(Buffer.alloc(64 * 1024, 'a'));
      expect(bomb.length).toBeLessThan(1024);
      expect(refusal(() => bodyBytes(event(bomb, { 'content-encoding': encoding }), 1024))).toMatchObject({
        status: 413,
        code: 'request_too_large',
      });
      // Exactly at the limit is still accepted.
      const exact = Buffer.alloc(1024, 'a');
      expect(bodyBytes(event(compress(exact), { 'content-encoding': encoding }), 1024)).toEqual(exact);
    },
  );
});
