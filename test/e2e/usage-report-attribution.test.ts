import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageReport } from '#core/usage-report.ts';
import { manualClock } from '#test/fixtures.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';
import { settledReport } from '#test/usage.ts';

/**
 * Which model row a call that failed before its model was resolved is counted in (ADR 0008): the row of the model
 * it named when the catalog lists it — a request refused as invalid, a model with nothing left to serve it — and
 * `-` (no row) for any other string.
 */

const SEC = 1_000;
const MIN = 60_000;
const now = new Date();
const T0 = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), 12);
const clock = manualClock(T0);

const FAMA = 'famA-v4.1-flash';
/** A listed chat model whose every deployment is retired part-way through the workload. */
const STRANDED = 'famC-k3';
const UNKNOWN = 'famZ-never-listed';

let t: TestStack;
let report: UsageReport;

const chat = async (at: number, body: Record<string, unknown>, status: number): Promise<void> => {
  clock.advance(at - clock.now());
  const res = await t.post('/chat/completions', {
    messages: [{ role: 'user', content: 'How is the weather?' }],
    max_tokens: 16,
    ...body,
  });
  const text = await res.text();
  expect(res.status, text).toBe(status);
};

beforeAll(async () => {
  t = await startTestStack({ clock, consumers: true, usageReportIntervalMs: 0 });
  // A validation error (a parameter off the whitelist) on a listed model, and on a string no catalog lists.
  await chat(T0 + SEC, { model: FAMA, thinking: { type: 'enabled' } }, 400);
  await chat(T0 + 2 * SEC, { model: UNKNOWN, thinking: { type: 'enabled' } }, 400);
  // The same body on the listed model without a key: a 401 (the key is checked first), no row's to raise.
  clock.advance(SEC / 2);
  const keyless = await fetch(`${t.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: FAMA, messages: [{ role: 'user', content: 'hi' }], thinking: {} }),
  });
  expect(keyless.status).toBe(401);
  // The stranded model serves once, then loses every deployment: 503, no eligible model.
  await chat(T0 + 3 * SEC, { model: STRANDED }, 200);
  const registry = t.stack.container.registryStore;
  const { deployments } = await registry.load();
  const own = deployments.filter((d) => d.model === STRANDED);
  expect(own.length).toBeGreaterThan(0);
  await registry.put(
    [],
    own.map((d) => ({ ...d, status: 'retired' as const })),
  );
  await t.stack.container.registry.refresh();
  for (let i = 0; i < 2; i++) await chat(T0 + MIN + i * SEC, { model: STRANDED }, 503);
  report = (await settledReport(t, 6, T0 + 10 * MIN, undefined, 2)).report;
}, 120_000);
afterAll(() => t?.stop());

describe('usage.json model rows for calls that failed before their model was resolved', () => {
  const row = (id: string) => report.models.find((m) => m.id === id);

  it('counts a request refused as invalid in the row of the listed model it named, as the caller’s error', () => {
    expect(report.totals.requests).toBe(6);
    // The keyed call's; the keyless one is left to `-`.
    expect(row(FAMA)).toEqual({
      id: FAMA,
      requests: 1,
      tokens: 0,
      uptime_percent: 100,
      faults: 0,
      status: 'live',
    });
    expect(report.error_funnel).toContainEqual(
      expect.objectContaining({ group: 'agent-error', status: 400, count: 2 }),
    );
    expect(report.error_funnel).toContainEqual(
      expect.objectContaining({ group: 'agent-error', status: 401, count: 1 }),
    );
  });

  it('counts no-eligible-model 503s as faults of the model that had nothing left to serve it', () => {
    expect(row(STRANDED)).toMatchObject({
      requests: 3,
      uptime_percent: 33.333,
      faults: 2,
      status: 'degraded recently',
    });
    // The model's, in the funnel and the recent faults too: a model with nothing to serve it is not the platform
    // down (spec §7 keeps the incident for a registry that read as empty).
    expect(report.error_funnel).toContainEqual(
      expect.objectContaining({ group: STRANDED, status: 503, count: 2 }),
    );
    expect(report.recent_faults.map((f) => f.group)).toEqual([STRANDED, STRANDED]);
    expect(report.incidents).toEqual([]);
  });

  it('never makes a row of a string the catalog does not list', () => {
    expect(row(UNKNOWN)).toBeUndefined();
    expect(JSON.stringify(report)).not.toContain('famZ');
    // The keyed calls of listed models are all in their rows: only the unknown string's and the keyless one are
    // left to `-`.
    const inRows = report.models.reduce((sum, m) => sum + m.requests, 0);
    expect(inRows).toBe(report.totals.requests - 2);
  });
});
