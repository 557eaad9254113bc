import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { functionUrlEvent } from '#local/function-url.ts';

/** The parts of an IncomingMessage the event mapping reads. */
const request = (url: string, headers: Record<string, string | string[]> = {}, method = 'POST') =>
  ({
    url,
    method,
    headers,
    httpVersion: '1.1',
    socket: { remoteAddress: '127.0.0.1' },
  }) as unknown as IncomingMessage;

describe('functionUrlEvent (payload v2, as a Function URL delivers it)', () => {
  it('passes the path as sent and the raw query string, repeated parameters joined by commas', () => {
    const event = functionUrlEvent(request('/v1/models/a%2Fb?x=1&y=two%20words&x=3'), Buffer.alloc(0));
    expect(event.rawPath).toBe('/v1/models/a%2Fb');
    expect(event.requestContext.http.path).toBe('/v1/models/a%2Fb');
    expect(event.rawQueryString).toBe('x=1&y=two%20words&x=3');
    expect(event.queryStringParameters).toEqual({ x: '1,3', y: 'two words' });
  });

  it('has no query parameters without a query, nor with an empty one', () => {
    for (const url of ['/v1/chat/completions', '/v1/chat/completions?']) {
      const event = functionUrlEvent(request(url), Buffer.alloc(0));
      expect(event.rawPath).toBe('/v1/chat/completions');
      expect(event.rawQueryString).toBe('');
      expect(event.queryStringParameters).toBeUndefined();
    }
  });

  it('sends JSON as text and other bodies base64-encoded; cookies apart from the headers', () => {
    const json = functionUrlEvent(
      request('/v1/chat/completions', { 'content-type': 'application/json', cookie: 'a=1; b=2' }),
      Buffer.from('{"model":"m"}'),
    );
    expect(json.isBase64Encoded).toBe(false);
    expect(json.body).toBe('{"model":"m"}');
    expect(json.cookies).toEqual(['a=1', 'b=2']);
    expect(json.headers.cookie).toBeUndefined();

    const bytes = Buffer.from([0, 1, 2, 255]);
    const binary = functionUrlEvent(
      request('/v1/audio/transcriptions', { 'content-type': 'audio/wav' }),
      bytes,
    );
    expect(binary.isBase64Encoded).toBe(true);
    expect(Buffer.from(binary.body ?? '', 'base64')).toEqual(bytes);
  });

  it('sends a compressed body base64-encoded whatever its content type: its bytes are not text', () => {
    const gzipped = Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    const event = functionUrlEvent(
      request('/v1/chat/completions', { 'content-type': 'application/json', 'content-encoding': 'gzip' }),
      gzipped,
    );
    expect(event.isBase64Encoded).toBe(true);
    expect(Buffer.from(event.body ?? '', 'base64')).toEqual(gzipped);
    const identity = functionUrlEvent(
      request('/v1/chat/completions', { 'content-type': 'application/json', 'content-encoding': 'identity' }),
      Buffer.from('{}'),
    );
    expect(identity).toMatchObject({ isBase64Encoded: false, body: '{}' });
  });
});
