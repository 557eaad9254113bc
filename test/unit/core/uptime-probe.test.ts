import { describe, expect, it } from 'vitest';
import { isWellFormedKey, publicPrefix } from '#core/api-keys.ts';
import { type ProbeAnswer, probeChecks, probeIncrement, probeKey } from '#core/uptime-probe.ts';

const bytes = (fill: number) => (n: number) => new Uint8Array(n).fill(fill);
const answer = (status: number, headers: Record<string, string> = {}, body = ''): ProbeAnswer => ({
  status,
  headers,
  body,
});
const checks = probeChecks(() => probeKey(bytes(7)));
const byName = (name: string) => {
  const found = checks.find((c) => c.name === name);
  if (!found) throw new Error(`no check ${name}`);
  return found;
};

describe('the uptime probe’s checks', () => {
  it('preflights every POST endpoint and looks one key up', () => {
    expect(checks.map((c) => `${c.method} ${c.path}`)).toEqual([
      'OPTIONS /chat/completions',
      'OPTIONS /embeddings',
      'OPTIONS /audio/transcriptions',
      'OPTIONS /audio/speech',
      'GET /models',
    ]);
    for (const c of checks.filter((c) => c.method === 'OPTIONS'))
      expect(c.headers()).toMatchObject({ 'access-control-request-method': 'POST' });
  });

  it('uses a well-formed key nobody has, new each attempt and named in its public prefix', () => {
    const key = probeKey(bytes(200));
    expect(isWellFormedKey(key)).toBe(true);
    expect(publicPrefix(key)).toBe('svc_live_uptimepr');
    expect(probeKey(bytes(1))).not.toBe(probeKey(bytes(2)));
    expect(byName('key lookup').headers()).toEqual({ authorization: `Bearer ${probeKey(bytes(7))}` });
    // Asked for each attempt: a retry does not reuse a key an instance may have learnt is unknown.
    let n = 0;
    const lookup = probeChecks(() => probeKey(bytes(n++))).find((c) => c.name === 'key lookup');
    expect(lookup?.headers()).not.toEqual(lookup?.headers());
  });

  it('takes a 204 preflight allowing POST, and nothing else', () => {
    const preflight = byName('preflight /embeddings');
    expect(preflight.expect(answer(204, { 'access-control-allow-methods': 'POST, OPTIONS' }))).toBeNull();
    expect(preflight.expect(answer(204, { 'access-control-allow-methods': 'GET, OPTIONS' }))).toBe(
      'answered 204 without POST among the allowed methods',
    );
    expect(preflight.expect(answer(204))).not.toBeNull();
    for (const status of [200, 403, 404, 500, 502, 503, 504])
      expect(preflight.expect(answer(status)), String(status)).toBe(`answered ${status}, not 204`);
  });

  it('takes a 401 invalid_api_key for the key lookup; a 503 (the key store unreachable) or any other is a failure', () => {
    const lookup = byName('key lookup');
    const refused = JSON.stringify({
      error: { message: 'x', type: 'invalid_request_error', code: 'invalid_api_key' },
    });
    expect(lookup.expect(answer(401, {}, refused))).toBeNull();
    expect(lookup.expect(answer(503, {}, '{"error":{"code":"service_unavailable"}}'))).toBe(
      'answered 503, not 401',
    );
    // A 200 would mean a key nobody has was taken.
    expect(lookup.expect(answer(200, {}, '{"data":[]}'))).toBe('answered 200, not 401');
    expect(lookup.expect(answer(401, {}, '{"message":"Unauthorized"}'))).toBe(
      'answered 401 without the invalid_api_key error',
    );
    expect(lookup.expect(answer(401, {}, '<html>'))).toBe('answered 401 with a body that is not JSON');
    // Only the 503 is the key store's: what every call on every endpoint would meet.
    expect(lookup.storeUnreachable?.(answer(503))).toBe(true);
    expect(lookup.storeUnreachable?.(answer(502))).toBe(false);
    expect(byName('preflight /embeddings').storeUnreachable).toBeUndefined();
  });
});

describe('probeIncrement', () => {
  it('files a round with failures in the minute it began: the checks made and a bit per failed check', () => {
    const at = Date.UTC(2026, 10, 22, 23, 59, 58);
    expect(
      probeIncrement({
        at,
        checks: 5,
        failures: [
          { index: 0, check: 'preflight /chat/completions', reason: 'answered 502, not 204' },
          { index: 4, check: 'key lookup', reason: 'answered 503, not 401' },
        ],
      }),
    ).toEqual({ day: '2026-11-22', subject: 'minutes#23', counters: { pc59: 5, pf59: 0b10001 } });
    expect(probeIncrement({ at, checks: 5, failures: [] })).toBeNull();
  });

  it('sets the bit after the checks when the key lookup met an unreachable store', () => {
    const at = Date.UTC(2026, 10, 22, 3, 4, 5);
    expect(
      probeIncrement({
        at,
        checks: 5,
        failures: [
          { index: 4, check: 'key lookup', reason: 'answered 503, not 401', storeUnreachable: true },
        ],
      }),
    ).toEqual({ day: '2026-11-22', subject: 'minutes#03', counters: { pc04: 5, pf04: 0b110000 } });
  });
});
