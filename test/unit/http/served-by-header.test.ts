import { validateHeaderValue } from 'node:http';
import { describe, expect, it } from 'vitest';
import { headerValue } from '#http/inference-handler.ts';

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
    expect(decodeURIComponent(headerValue('模型 7b'))).toBe('模型 7b');
  });
});
