import { validateHeaderValue } from 'node:http';
import { describe, expect, it } from 'vitest';
import { cdnFirstByteBy, headerValue } from '#http/inference-handler.ts';

/**
 * `x-svc-served-model` shows the registry's upstream model name. A name the HTTP runtime refuses as a header
 * value would fail the response after the upstream had served it: no answer, and no settlement.
 */
describe('headerValue', () => {
  it('keeps visible ASCII as it is', () => {
    expect(headerValue('meta-llama/Llama-3.1-8B-Instruct:free')).toBe(
      'meta-llama/Llama-3.1-8B-Instruct:free',
    );
  });

  it('percent-encodes anything else as UTF-8, so the runtime accepts it', () => {
    for (const name of ['模型-7b', 'm\r\nset-cookie: a=1', 'tab\there', 'lone \uD800 surrogate', '100%']) {
      const value = headerValue(name);
      expect(() => validateHeaderValue('x-svc-served-model', value), name).not.toThrow();
      expect(value).not.toMatch(/[\r\n]/);
    }
    expect(headerValue('模型-7b')).toBe('%E6%A8%A1%E5%9E%8B-7b');
    // A name that already looks encoded is encoded too: what the header says decodes to the name, always.
    expect(headerValue('a%20b')).toBe('a%2520b');
    expect(decodeURIComponent(headerValue('a%20b'))).toBe('a%20b');
    expect(decodeURIComponent(headerValue('模型 7b'))).toBe('模型 7b');
  });
});

describe('cdnFirstByteBy: when a call that came through CloudFront must begin its response', () => {
  const event = (headers: Record<string, string>, timeEpoch?: number) =>
    ({ headers, requestContext: { timeEpoch } }) as unknown as Parameters<typeof cdnFirstByteBy>[0];
  const CF = { 'x-amz-cf-id': 'abc==' };

  it('is not bound when the call did not come through the CDN, or there is none', () => {
    expect(cdnFirstByteBy(event({}, Date.now()), 60_000)).toBeNull();
    expect(cdnFirstByteBy(event(CF, Date.now()), 0)).toBeNull();
  });

  it('counts from when API Gateway received the request, so a cold start is inside the wait', () => {
    const received = Date.now() - 2_000;
    expect(cdnFirstByteBy(event(CF, received), 60_000)).toBe(received + 57_000);
  });

  it('is past already when the request waited longer than CloudFront does', () => {
    const received = Date.now() - 70_000;
    expect(cdnFirstByteBy(event(CF, received), 60_000)).toBe(received + 57_000);
  });

  it('counts from now when the receipt time makes no sense, and keeps half of a short wait', () => {
    const before = Date.now();
    expect(cdnFirstByteBy(event(CF, before - 3_600_000), 60_000)).toBeGreaterThanOrEqual(before + 57_000);
    const ahead = cdnFirstByteBy(event(CF, before + 3_600_000), 60_000) as number;
    expect(ahead).toBeGreaterThanOrEqual(before + 57_000);
    expect(ahead).toBeLessThan(before + 58_000);
    const short = cdnFirstByteBy(event(CF), 2_000) as number;
    expect(short - Date.now()).toBeGreaterThan(900);
    expect(short - Date.now()).toBeLessThanOrEqual(1_000);
  });
});
