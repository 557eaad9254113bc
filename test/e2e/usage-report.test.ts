import { DynamoDBClient, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashKey } from '#adapters/dynamo-key-store.ts';
import { DynamoUsage } from '#adapters/dynamo-usage.ts';
import { publicPrefix } from '#core/api-keys.ts';
import { usdToNano } from '#core/pricing.ts';
import type { UsageReport } from '#core/usage-report.ts';
import { localClientConfig } from '#local/emulators.ts';
import { manualClock } from '#test/fixtures.ts';
import { NO_CIRCUIT_BREAKING, startTestStack, type TestStack } from '#test/stack.ts';
import { settledReport, withEmptyRegistry } from '#test/usage.ts';
import { usageSchemaErrors } from '#test/usage-schema.ts';

/**
 * A known workload through the running stack — gateway, settlement queue and consumer, usage table, report
 * function, site bucket — and every figure of the `usage.json` it produces, fetched over HTTP. The gateway's
 * clock is driven by hand, so each call lands in a known UTC minute.
 */

const SEC = 1_000;
const MIN = 60_000;
const now = new Date();
/** Noon (UTC) today: the workload and both reports stay on one UTC day. */
const T0 = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), 12);
const DAY = new Date(T0).toISOString().slice(0, 10);
const clock = manualClock(T0);

const FAMA = 'famA-v4.1-flash';
const FAMB = 'famB-5.3';
const iso = (ms: number) => new Date(ms).toISOString();

let t: TestStack;
/** Every call of the workload, as the test expects it to be reported. */
const calls: {
  at: number;
  model: string | null;
  group: string;
  status: number;
  detail: string | null;
  tokens: number;
}[] = [];
const accounts: string[] = ['acct_demo'];
const keys: string[] = [];
let listed: string[] = [];

/** Sets the gateway's clock to `at` and makes one call, recording what the report should say about it. */
const call = async (
  at: number,
  expected: { model: string | null; group?: string; status: number; detail?: string; clientStatus?: number },
  send: () => Promise<Response>,
): Promise<Response> => {
  clock.advance(at - clock.now());
  const res = await send();
  const text = await res.text();
  expect(res.status, text).toBe(expected.clientStatus ?? expected.status);
  let tokens = 0;
  if (expected.status === 200) {
    const usage = (JSON.parse(text) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    tokens = usage.prompt_tokens + usage.completion_tokens;
  }
  calls.push({
    at,
    model: expected.model,
    group: expected.group ?? 'agent-error',
    status: expected.status,
    detail: expected.detail ?? null,
    tokens,
  });
  return res;
};

const chatBody = (model: string, extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user', content: 'How is the weather?' }],
  max_tokens: 16,
  ...extra,
});
const chat = (key: string, body: unknown) =>
  t.post('/chat/completions', body, { authorization: `Bearer ${key}`, 'content-type': 'application/json' });

const ok = (model: string) => ({ model, status: 200 });

beforeAll(async () => {
  t = await startTestStack({
    clock,
    consumers: true,
    // No schedule: the test publishes the report itself, as of the times it chooses; holds are never swept.
    usageReportIntervalMs: 0,
    sweepIntervalMs: 3_600_000,
    functionEnv: {
      KEY_CACHE_TTL_MS: '0',
      ACCOUNT_CACHE_TTL_MS: '0',
      // Circuit breakers would turn the 5xx series into 503s part-way; this test is about the report.
      ...NO_CIRCUIT_BREAKING,
    },
  });
  keys.push(t.apiKey);
  const { models } = await t.stack.container.registryStore.load();
  listed = models.filter((m) => m.status === 'active').map((m) => m.id);

  const demo = t.apiKey;
  // A trusted account held to 2 requests per minute, and an unverified one with an empty wallet.
  const limited = await t.stack.container.accounts.createAccount({ id: 'acct_usage_limited' });
  const limitedKey = (await t.stack.container.accounts.createKey(limited.id)).key;
  await t.stack.container.accounting.topUp({
    accountId: limited.id,
    amount: usdToNano(5),
    reference: 'seed-limited',
    at: T0,
  });
  await t.stack.container.accounting.setQuota(limited.id, { rpm: 2 }, clock.now());
  const poor = await t.stack.container.accounts.createAccount({ id: 'acct_usage_poor' });
  const poorKey = (await t.stack.container.accounts.createKey(poor.id)).key;
  const unknownKey = `svc_live_${'Zz9'.repeat(10)}`;
  accounts.push(limited.id, poor.id);
  keys.push(limitedKey, poorKey, unknownKey);

  let s = 0;
  const at0 = () => T0 + ++s * SEC;
  // Minute 0: successes on two models, the caller's own errors, tier refusals and upstream faults.
  for (let i = 0; i < 3; i++) await call(at0(), ok(FAMA), () => chat(demo, chatBody(FAMA)));
  for (let i = 0; i < 2; i++) await call(at0(), ok(FAMB), () => chat(demo, chatBody(FAMB)));
  // An upstream fault absorbed by fallback is a success for the client, and for the report.
  t.simulator.setFaults('sim-a', { error: 'server_error' });
  const absorbed = await call(at0(), ok(FAMA), () => chat(demo, chatBody(FAMA)));
  expect(absorbed.headers.get('x-svc-provider')).toBe('sim-b');
  t.simulator.resetFaults();
  // Refused before its model was resolved, but it named a listed model: counted in that model's row.
  await call(at0(), { model: FAMA, status: 400, detail: 'invalid request' }, () =>
    chat(demo, chatBody(FAMA, { acct_demo_secret_param: 1 })),
  );
  await call(at0(), { model: null, status: 401, detail: 'missing or invalid API key' }, () =>
    chat(unknownKey, chatBody(FAMA)),
  );
  await call(at0(), { model: null, status: 404, detail: 'model not found' }, () =>
    chat(demo, chatBody(`acct_demo-${demo}`)),
  );
  for (let i = 0; i < 2; i++) await call(at0(), ok(FAMA), () => chat(limitedKey, chatBody(FAMA)));
  await call(at0(), { model: FAMA, status: 429, detail: 'rate limit of the account’s tier' }, () =>
    chat(limitedKey, chatBody(FAMA)),
  );
  await call(at0(), { model: FAMA, status: 402, detail: 'insufficient wallet balance' }, () =>
    chat(poorKey, chatBody(FAMA)),
  );
  t.simulator.setFaults('sim-a', { error: 'overloaded' });
  t.simulator.setFaults('sim-b', { error: 'overloaded' });
  await call(
    at0(),
    { model: FAMB, group: FAMB, status: 429, detail: 'every deployment overloaded (3 attempts)' },
    () => chat(demo, chatBody(FAMB)),
  );
  t.simulator.resetFaults();
  t.simulator.setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 3 });
  await call(
    at0(),
    {
      model: FAMA,
      group: FAMA,
      status: 500,
      // The stream began with 200 and then broke: a server fault all the same.
      clientStatus: 200,
      detail: 'stream interrupted after the first byte: connection dropped',
    },
    () => chat(demo, chatBody(FAMA, { stream: true })),
  );
  t.simulator.resetFaults();

  // Minute 10: every deployment of famB fails (4 × 500) while famA serves 2: a MINOR incident.
  t.simulator.setFaults('sim-a', { error: 'server_error' });
  t.simulator.setFaults('sim-b', { error: 'server_error' });
  for (let i = 0; i < 4; i++)
    await call(
      T0 + 10 * MIN + i * SEC,
      {
        model: FAMB,
        group: FAMB,
        status: 500,
        detail: 'every deployment failed (3 attempts; last: upstream server error)',
      },
      () => chat(demo, chatBody(FAMB)),
    );
  t.simulator.resetFaults();
  for (let i = 0; i < 2; i++)
    await call(T0 + 10 * MIN + (10 + i) * SEC, ok(FAMA), () => chat(demo, chatBody(FAMA)));

  // Minutes 20 and 21: the registry reads as empty (3 × 503): a MAJOR incident of 2 minutes.
  const empty = {
    model: null,
    group: 'incident',
    status: 503,
    detail: 'no eligible model: the model registry is empty',
  };
  await withEmptyRegistry(t, async () => {
    await call(T0 + 20 * MIN + 5 * SEC, empty, () => chat(demo, chatBody(FAMA)));
    await call(T0 + 20 * MIN + 6 * SEC, empty, () => chat(demo, chatBody(FAMA)));
    await call(T0 + 21 * MIN + 5 * SEC, empty, () => chat(demo, chatBody(FAMA)));
  });
  // Minute 22: served again.
  await call(T0 + 22 * MIN + 5 * SEC, ok(FAMA), () => chat(demo, chatBody(FAMA)));
}, 120_000);
afterAll(() => t?.stop());

const tokensOf = (model: string) =>
  calls.filter((c) => c.model === model && c.status === 200).reduce((sum, c) => sum + c.tokens, 0);

describe('usage.json after a known workload', () => {
  let ongoing: { response: Response; report: UsageReport };
  let later: UsageReport;
  beforeAll(async () => {
    ongoing = await settledReport(t, calls.length, T0 + 23 * MIN + 30 * SEC);
    later = (await settledReport(t, calls.length, T0 + 40 * MIN)).report;
  }, 60_000);

  it('is served at the site root as JSON with a short cache lifetime, valid against the published schema', () => {
    expect(calls).toHaveLength(25);
    expect(ongoing.response.headers.get('content-type')).toBe('application/json');
    expect(ongoing.response.headers.get('cache-control')).toBe('public, max-age=60');
    expect(usageSchemaErrors(ongoing.report)).toBeNull();
    expect(usageSchemaErrors(later)).toBeNull();
  });

  it('says when it was generated and which 30 days it covers', () => {
    expect(later.version).toBe(1);
    expect(later.generated_at).toBe(iso(T0 + 40 * MIN));
    const first = new Date(T0 - 29 * 86_400_000).toISOString().slice(0, 10);
    expect(later.window).toEqual({ days: 30, start: `${first}T00:00:00.000Z`, end: iso(T0 + 40 * MIN) });
  });

  it('totals every settled call, the tokens of successes, 2 active models, 1 day and 3 minutes down', () => {
    const tokens = calls.reduce((sum, c) => sum + c.tokens, 0);
    expect(tokens).toBeGreaterThan(0);
    expect(later.totals).toEqual({
      requests: 25,
      tokens,
      models_active: 2,
      days_serving: 1,
      // 3 of the window's 42,520 minutes so far (29 days, and 12:40 of today) were down, rounded down.
      uptime_percent: 99.992,
      downtime_minutes: 3,
    });
  });

  it('detects both incidents, and resolves the second five minutes after its last down minute', () => {
    const minor = {
      name: 'Elevated error rate: 67% of calls failed',
      severity: 'MINOR',
      status: 'RESOLVED',
      start: iso(T0 + 10 * MIN),
      end: iso(T0 + 11 * MIN),
      downtime_minutes: 1,
    };
    const major = {
      name: 'Service unavailable: no eligible model (503)',
      severity: 'MAJOR',
      start: iso(T0 + 20 * MIN),
      downtime_minutes: 2,
    };
    expect(ongoing.report.incidents).toEqual([{ ...major, status: 'ONGOING', end: null }, minor]);
    expect(later.incidents).toEqual([{ ...major, status: 'RESOLVED', end: iso(T0 + 22 * MIN) }, minor]);
  });

  it('gives the tokens of each UTC day of the window', () => {
    expect(later.tokens_per_day).toHaveLength(30);
    expect(later.tokens_per_day.at(-1)).toEqual({ day: DAY, tokens: later.totals.tokens });
    expect(later.tokens_per_day.slice(0, -1).every((d) => d.tokens === 0)).toBe(true);
  });

  it('rates each model by its own faults, not by the callers’ errors, and lists the idle ones as live', () => {
    const idle = listed
      .filter((id) => id !== FAMA && id !== FAMB)
      .sort((a, b) => a.localeCompare(b))
      .map((id) => ({ id, requests: 0, tokens: 0, uptime_percent: 100, faults: 0, status: 'live' }));
    expect(later.models).toEqual([
      // 9 successes, 1 broken stream; the 400, the 429 and the 402 were the callers'.
      {
        id: FAMA,
        requests: 13,
        tokens: tokensOf(FAMA),
        uptime_percent: 90,
        faults: 1,
        status: 'degraded recently',
      },
      // 2 successes, 1 overloaded, 4 failures.
      {
        id: FAMB,
        requests: 7,
        tokens: tokensOf(FAMB),
        uptime_percent: 28.571,
        faults: 5,
        status: 'degraded recently',
      },
      ...idle,
    ]);
  });

  it('lists the newest model of each family as the frontier', () => {
    const live = (id: string, family: string) => ({ id, family, requests: 0, tokens: 0, status: 'live' });
    expect(later.frontier_models).toEqual([
      // famA's builds were all published together: the dated 1017 build has the highest output rate.
      live('famA-v4.1-flash-1017', 'famA'),
      { id: FAMB, family: 'famB', requests: 7, tokens: tokensOf(FAMB), status: 'degraded recently' },
      live('famC-k3', 'famC'),
      live('famD-5-preview', 'famD'),
      live('famE-v2.6-pro', 'famE'),
      live('famF3.8-27b', 'famF'),
      live('famG-4-argon', 'famG'),
      live('famH-nemotron-3.5-super-vl', 'famH'),
    ]);
  });

  it('funnels every error by model or pseudo-group and status', () => {
    expect(later.error_funnel).toEqual([
      { group: FAMB, status: 500, count: 4, label: 'upstream fault after fallbacks' },
      { group: 'incident', status: 503, count: 3, label: 'no eligible model (incident)' },
      { group: 'agent-error', status: 400, count: 1, label: 'invalid request' },
      { group: 'agent-error', status: 401, count: 1, label: 'invalid API key' },
      { group: 'agent-error', status: 402, count: 1, label: 'insufficient balance' },
      { group: 'agent-error', status: 404, count: 1, label: 'model not found' },
      { group: 'agent-error', status: 429, count: 1, label: 'tier rate limit (not downtime)' },
      { group: FAMA, status: 500, count: 1, label: 'upstream fault after fallbacks' },
      { group: FAMB, status: 429, count: 1, label: 'upstream overloaded' },
    ]);
  });

  it('lists the recent faults newest first, with their minute, group, status and detail', () => {
    // The caller's own errors are in the funnel above, not among the faults.
    const expected = calls
      .filter((c) => c.status !== 200 && c.group !== 'agent-error')
      .reverse()
      .map((c) => ({ at: iso(c.at), group: c.group, status: c.status, detail: c.detail }));
    expect(expected).toHaveLength(9);
    expect(later.recent_faults).toEqual(expected);
  });

  it('keeps the real faults listed when newer caller errors logged by older code are still in the table', async () => {
    // Before caller errors stopped being filed as faults, they were: such items live out their 40 days.
    const client = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
    try {
      for (let i = 0; i < 25; i++) {
        const at = T0 + 30 * MIN + i * SEC;
        await client.send(
          new PutItemCommand({
            TableName: t.stack.resources.tables.usage,
            Item: {
              pk: { S: `faults#${DAY}` },
              sk: { S: `${String(at).padStart(13, '0')}#req_old${i}` },
              at: { N: String(at) },
              group: { S: 'agent-error' },
              status: { N: '401' },
              detail: { S: 'invalid API key' },
            },
          }),
        );
      }
    } finally {
      client.destroy();
    }
    const { report } = await settledReport(t, calls.length, T0 + 40 * MIN);
    expect(report.recent_faults).toEqual(later.recent_faults);
    expect(report.recent_faults).toHaveLength(9);
  });

  it('reads the hour before its window for the first minutes’ lookback, and counts none of it', async () => {
    // The day before the window of the report as of T0 + 40 min: its last hour's minute counters in two shards, and
    // other subjects of that day, which the lookback's query leaves out.
    const before = new Date(T0 + 40 * MIN - 30 * 86_400_000).toISOString().slice(0, 10);
    const client = new DynamoDBClient(localClientConfig(t.stack.emulators.dynamodb));
    const table = t.stack.resources.tables.usage;
    const put = (sk: string, counters: Record<string, number>) =>
      client.send(
        new PutItemCommand({
          TableName: table,
          Item: {
            pk: { S: `agg#${before}` },
            sk: { S: sk },
            ...Object.fromEntries(Object.entries(counters).map(([name, n]) => [name, { N: String(n) }])),
          },
        }),
      );
    try {
      await put('minutes#23#0', { r59: 2, e59: 2 });
      await put('minutes#23#5', { r58: 4, r59: 1, e59: 1 });
      await put('minutes#22#0', { r10: 1 });
      await put(`model#${FAMA}#0`, { requests: 7, successes: 7, tokens: 700 });
      expect(await new DynamoUsage(client, table).minuteRows(before, 23)).toEqual([
        { day: before, subject: 'minutes#23', counters: { r58: 4, r59: 3, e59: 3 } },
      ]);
    } finally {
      client.destroy();
    }
    const { report } = await settledReport(t, calls.length, T0 + 40 * MIN);
    expect(report.totals).toEqual(later.totals);
    expect(report.incidents).toEqual(later.incidents);
    expect(report.tokens_per_day).toEqual(later.tokens_per_day);
  });

  it('names no account, key prefix or key hash, nor anything a caller sent', () => {
    const text = JSON.stringify(later) + JSON.stringify(ongoing.report);
    for (const account of accounts) expect(text).not.toContain(account);
    for (const key of keys) {
      expect(text).not.toContain(key);
      expect(text).not.toContain(publicPrefix(key));
      expect(text).not.toContain(hashKey(key));
    }
    expect(text).not.toMatch(/acct_|svc_live_|secret_param|req_/);
    expect(text).not.toMatch(/[0-9a-f]{64}/i);
  });
});
