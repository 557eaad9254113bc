import type { Context } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import type { Logger } from '#adapters/logger.ts';
import type { AggregateIncrement } from '#core/usage-aggregates.ts';
import { createHandler, parseProbeBaseUrl, type UptimeProbeDeps } from '#functions/uptime-probe.ts';

/**
 * The probe's round as the function runs it, with the network and the table stood in for: which answers fail a
 * check, the second try, the minute a round is dated in, and what is logged and filed. The real network and table
 * are test/e2e/uptime-probe.test.ts's.
 */

const AT = Date.UTC(2026, 10, 22, 12, 30, 5);

/** Answers each request with what `answer` says for its method and path, counting the requests per check. */
const harness = (
  answer: (method: string, path: string, attempt: number) => Response | Error,
  store: { fails?: boolean } = {},
) => {
  const attempts = new Map<string, number>();
  const filed: AggregateIncrement[] = [];
  const warnings: Record<string, unknown>[] = [];
  const keys: string[] = [];
  const log = {
    warn: (message: string, fields: Record<string, unknown>) => warnings.push({ message, ...fields }),
  } as unknown as Logger;
  const deps: UptimeProbeDeps = {
    baseUrl: 'https://cdn.example/v1',
    probeLog: {
      recordFailures: async (increment) => {
        if (store.fails) throw new Error('ProvisionedThroughputExceededException');
        filed.push(increment);
      },
    },
    clock: { now: () => AT },
    log,
    timeoutMs: 1_000,
    retryDelayMs: 1,
    randomBytes: (n) => new Uint8Array(n).fill(keys.length),
    fetch: async (input, init) => {
      const path = String(input).replace('https://cdn.example/v1', '');
      const key = `${init?.method} ${path}`;
      const attempt = (attempts.get(key) ?? 0) + 1;
      attempts.set(key, attempt);
      const authorization = new Headers(init?.headers).get('authorization');
      if (authorization) keys.push(authorization);
      const result = answer(init?.method ?? 'GET', path, attempt);
      if (result instanceof Error) throw result;
      return result;
    },
  };
  const run = () =>
    createHandler(() => deps)({ time: '2020-01-01T00:00:00Z', source: 'aws.scheduler' }, {} as Context);
  return { run, attempts, filed, warnings, keys };
};

const healthy = (method: string): Response =>
  method === 'OPTIONS'
    ? new Response(null, { status: 204, headers: { 'access-control-allow-methods': 'POST, OPTIONS' } })
    : new Response(JSON.stringify({ error: { code: 'invalid_api_key' } }), { status: 401 });

const refused = () => Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } });

describe('the uptime probe’s round', () => {
  it('files nothing when every check is answered as it should be, each asked once', async () => {
    const h = harness((method) => healthy(method));
    expect(await h.run()).toEqual({ at: new Date(AT).toISOString(), checks: 5, failed: 0, failures: [] });
    expect([...h.attempts.values()]).toEqual([1, 1, 1, 1, 1]);
    expect(h.filed).toEqual([]);
    expect(h.warnings).toEqual([]);
  });

  it('asks a failed check once more, and takes a second answer that is right for a pass', async () => {
    const h = harness((method, _path, attempt) => (attempt === 1 ? refused() : healthy(method)));
    expect(await h.run()).toMatchObject({ failed: 0 });
    expect([...h.attempts.values()]).toEqual([2, 2, 2, 2, 2]);
    expect(h.filed).toEqual([]);
    // The key lookup's second try has a key of its own: the first may have taught an instance it is unknown.
    expect(h.keys).toHaveLength(2);
    expect(h.keys[0]).not.toBe(h.keys[1]);
  });

  it('fails a check whose second answer is wrong too, reports that one, and files the round in the minute it ran', async () => {
    // The embeddings function cannot start (its preflight answers 500), and the key store is unreachable (503).
    const h = harness((method, path, attempt) => {
      if (path === '/embeddings') return attempt === 1 ? refused() : new Response('{}', { status: 500 });
      if (path === '/models')
        return new Response('{"error":{"code":"service_unavailable"}}', { status: 503 });
      return healthy(method);
    });
    const summary = await h.run();
    expect(summary.failures).toEqual([
      { index: 1, check: 'preflight /embeddings', reason: 'answered 500, not 204' },
      { index: 4, check: 'key lookup', reason: 'answered 503, not 401', storeUnreachable: true },
    ]);
    // Dated by the clock, not by the tick it was handed (a tick delivered hours late measures now).
    expect(summary.at).toBe(new Date(AT).toISOString());
    // Checks 1 and 4, and the key store's bit after the five checks.
    expect(h.filed).toEqual([
      { day: '2026-11-22', subject: 'minutes#12', counters: { pc30: 5, pf30: 0b110010 } },
    ]);
    // Logged in fixed words: the check and why, never an answer's body or the key; then one line for the round,
    // which the alarm counts.
    expect(h.warnings).toEqual([
      {
        message: 'uptime probe check failed',
        check: 'preflight /embeddings',
        reason: 'answered 500, not 204',
      },
      { message: 'uptime probe check failed', check: 'key lookup', reason: 'answered 503, not 401' },
      { message: 'uptime probe round failed', failed: 2, checks: 5 },
    ]);
  });

  it('names a request that got no answer by its error code or its timeout, never its message', async () => {
    const h = harness((_method, path) =>
      path === '/models'
        ? Object.assign(new Error('The operation was aborted due to timeout'), { name: 'TimeoutError' })
        : Object.assign(new TypeError('fetch failed: https://cdn.example/v1 secret'), {
            cause: { code: 'ENOTFOUND' },
          }),
    );
    const reasons = new Set((await h.run()).failures.map((f) => f.reason));
    expect(reasons).toEqual(new Set(['no answer (ENOTFOUND)', 'no answer within 1000 ms']));
  });

  it('fails the invocation when the round cannot be filed, after logging what it found', async () => {
    const h = harness(() => refused(), { fails: true });
    await expect(h.run()).rejects.toThrow('ProvisionedThroughputExceededException');
    // The function's error alarm fires, and the round is in its log for the probe's own alarm.
    expect(h.warnings).toHaveLength(6);
    expect(h.warnings.at(-1)).toEqual({ message: 'uptime probe round failed', failed: 5, checks: 5 });
  });
});

describe('parseProbeBaseUrl', () => {
  it('takes an http(s) URL ending in /v1, without a trailing slash', () => {
    expect(parseProbeBaseUrl('https://d123.cloudfront.net/v1/')).toBe('https://d123.cloudfront.net/v1');
    expect(parseProbeBaseUrl('http://127.0.0.1:8787/v1')).toBe('http://127.0.0.1:8787/v1');
    expect(parseProbeBaseUrl('http://[::1]:8787/v1')).toBe('http://[::1]:8787/v1');
  });

  it('refuses anything else at cold start, naming the variable', () => {
    for (const bad of [
      '',
      'https://cdn.example',
      'ftp://cdn.example/v1',
      'https://cdn.example/v1?x=1',
      'not a url',
    ])
      expect(() => parseProbeBaseUrl(bad), bad).toThrow(/PROBE_BASE_URL/);
  });
});
