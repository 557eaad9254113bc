import { validateHeaderValue } from 'node:http';
import { describe, expect, it } from 'vitest';
import { CallRecorder } from '#core/call-recorder.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import type { Usage } from '#core/usage.ts';
import { firstByteBy, headerValue, logHeldReport, sendSettlement } from '#http/inference-handler.ts';

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

describe('firstByteBy: when a call must begin its response, given what is in front of the function', () => {
  type Event = Parameters<typeof firstByteBy>[0];
  const event = (headers: Record<string, string>, timeEpoch?: number, via?: 'rest-api') =>
    ({ headers, requestContext: { timeEpoch }, ...(via ? { via } : {}) }) as unknown as Event;
  const CF = { 'x-amz-cf-id': 'abc==' };
  const CDN = { cdnReadTimeoutMs: 60_000, restApiIdleTimeoutMs: 0 };
  const cdnFirstByteBy = (e: Event, cdnReadTimeoutMs: number) =>
    firstByteBy(e, { cdnReadTimeoutMs, restApiIdleTimeoutMs: 0 });

  it('is not bound when the call came through neither the CDN nor the REST API, or they are not set', () => {
    expect(firstByteBy(event({}, Date.now()), CDN)).toBeNull();
    expect(cdnFirstByteBy(event(CF, Date.now()), 0)).toBeNull();
    // A Function URL call: no limit in front, the function's own deadline bounds it.
    expect(
      firstByteBy(event({}, Date.now()), { cdnReadTimeoutMs: 60_000, restApiIdleTimeoutMs: 300_000 }),
    ).toBeNull();
    expect(firstByteBy(event({}, Date.now(), 'rest-api'), CDN)).toBeNull();
  });

  it('counts from when API Gateway received the request, so a cold start is inside the wait', () => {
    const received = Date.now() - 2_000;
    expect(cdnFirstByteBy(event(CF, received), 60_000)).toBe(received + 57_000);
  });

  it('through the REST API alone: its idle timeout, since a non-stream call is silent until it is done', () => {
    const received = Date.now() - 1_000;
    const limits = { cdnReadTimeoutMs: 60_000, restApiIdleTimeoutMs: 300_000 };
    expect(firstByteBy(event({}, received, 'rest-api'), limits)).toBe(received + 297_000);
    // Through the CDN, whose origin is the REST API: the shorter of the two.
    expect(firstByteBy(event(CF, received, 'rest-api'), limits)).toBe(received + 57_000);
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

/**
 * The settlement record is the only trace of a charge. Lambda ends the invocation at its timeout, so a send still
 * retrying then (a slow queue: 5 attempts of up to 5 s) must be logged for replay before that, not after.
 */
describe('sendSettlement', () => {
  const record = { id: 'req_1', cost: 1234 } as unknown as SettlementRecord;
  const logged = () => {
    const lines: { message: string; fields: Record<string, unknown> }[] = [];
    return {
      lines,
      log: { error: (message: string, fields?: object) => lines.push({ message, fields: { ...fields } }) },
    };
  };

  it('logs nothing when the queue acknowledges in time', async () => {
    const { lines, log } = logged();
    await sendSettlement({ settlements: { send: async () => {} }, log }, record, 1_000);
    expect(lines).toEqual([]);
  });

  it('logs the whole record when the send fails', async () => {
    const { lines, log } = logged();
    const error = new Error('queue gone');
    await sendSettlement({ settlements: { send: () => Promise.reject(error) }, log }, record, 1_000);
    expect(lines).toEqual([{ message: 'settlement record not sent', fields: { record, error } }]);
  });

  it('logs the whole record when the send throws before it returns', async () => {
    const { lines, log } = logged();
    const error = new Error('record would not encode');
    const send = (): Promise<void> => {
      throw error;
    };
    await sendSettlement({ settlements: { send }, log }, record, 1_000);
    expect(lines).toEqual([{ message: 'settlement record not sent', fields: { record, error } }]);
  });

  it('logs the whole record, and returns, when the send is not acknowledged within what is left', async () => {
    const { lines, log } = logged();
    // A send that never ends: without the budget this would wait forever (the test's own timeout).
    await sendSettlement({ settlements: { send: () => new Promise<void>(() => {}) }, log }, record, 20);
    expect(lines).toEqual([{ message: expect.stringMatching(/not acknowledged/), fields: { record } }]);
  });
});

describe('logHeldReport', () => {
  const usage = (promptTokens: number, completionTokens: number): Usage => ({
    promptTokens,
    completionTokens,
    cachedPromptTokens: 0,
    reasoningTokens: 0,
    source: 'upstream',
  });
  const warnings = () => {
    const lines: unknown[] = [];
    return { lines, log: { warn: (message: string, fields?: object) => lines.push({ message, ...fields }) } };
  };
  const call = new CallRecorder('chat.completions', 'req_held', { now: () => 0 });

  it('logs the counts reported and billed, and only when they differ', () => {
    const { lines, log } = warnings();
    logHeldReport(log, call, usage(10, 5), usage(10, 5));
    expect(lines).toEqual([]);
    logHeldReport(log, call, usage(1_000_000_000, 5), usage(4_200, 5));
    expect(lines).toEqual([
      {
        message: expect.stringMatching(/billed at its limits/),
        requestId: 'req_held',
        deployment: null,
        reported: { promptTokens: 1_000_000_000, completionTokens: 5 },
        billed: { promptTokens: 4_200, completionTokens: 5 },
      },
    ]);
  });
});
