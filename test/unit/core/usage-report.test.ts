import { describe, expect, it } from 'vitest';
import type { Model } from '#core/registry.ts';
import type { Outcome, SettlementRecord } from '#core/settlement.ts';
import { type ProbeRound, probeIncrement } from '#core/uptime-probe.ts';
import { aggregatesFor, faultDetail, faultFor, parseSubject } from '#core/usage-aggregates.ts';
import {
  type AggregateRow,
  buildUsageReport,
  funnelLabel,
  lookbackHour,
  windowDays,
} from '#core/usage-report.ts';
import { chatModel } from '#test/fixtures.ts';

const T0 = Date.UTC(2026, 10, 22, 12, 0);
const SEC = 1_000;
const MIN = 60_000;
const DAY = 86_400_000;

const USAGE = {
  promptTokens: 10,
  completionTokens: 5,
  cachedPromptTokens: 0,
  reasoningTokens: 0,
  source: 'upstream',
} as const;

let n = 0;
/** A settled call, by default a success of famA-a with 10 + 5 tokens, from an account that must never show. */
const call = (overrides: Partial<SettlementRecord> & { at?: number } = {}): SettlementRecord => {
  const { at = T0, ...rest } = overrides;
  const id = `req_${String(n++).padStart(4, '0')}`;
  return {
    v: 1,
    id,
    requestId: id,
    endpoint: 'chat.completions',
    accountId: 'acct_secret42',
    keyPrefix: 'svc_live_Sekr1t99',
    model: 'famA-a',
    deployment: 'famA-a@p1',
    provider: 'p1',
    stream: false,
    status: 200,
    outcome: 'success',
    usage: USAGE,
    cost: 100,
    admission: null,
    fault: null,
    attempts: [],
    timings: { receivedAt: at, firstByteMs: 5, totalMs: 10 },
    ...rest,
  };
};

const failed = (
  outcome: Outcome,
  status: number,
  kind: string,
  overrides: Partial<SettlementRecord> & { at?: number } = {},
): SettlementRecord =>
  call({
    outcome,
    status,
    usage: null,
    cost: 0,
    fault: { kind: kind as never, status, detail: 'acct_secret42 svc_live_Sekr1t99 said something private' },
    ...overrides,
  });

/** What the usage table holds after settling these calls, summed over shards as the adapter reads it. */
const rowsOf = (records: readonly SettlementRecord[]): AggregateRow[] => {
  const rows = new Map<string, { day: string; subject: string; counters: Record<string, number> }>();
  for (const increment of records.flatMap(aggregatesFor)) {
    const key = `${increment.day}|${increment.subject}`;
    const row = rows.get(key) ?? { day: increment.day, subject: increment.subject, counters: {} };
    for (const [name, value] of Object.entries(increment.counters))
      row.counters[name] = (row.counters[name] ?? 0) + value;
    rows.set(key, row);
  }
  return [...rows.values()];
};

const faultsOf = (records: readonly SettlementRecord[]) =>
  records
    .map(faultFor)
    .filter((f) => f !== null)
    .sort((a, b) => b.at - a.at);

const models: Model[] = [
  chatModel({ id: 'famA-a', family: 'famA', rates: { input: 1, output: 2 } }),
  chatModel({ id: 'famA-b', family: 'famA', rates: { input: 1, output: 3 } }),
  chatModel({ id: 'famA-old', family: 'famA', rates: { input: 9, output: 9 }, created: -1 }),
  chatModel({ id: 'famB-x', family: 'famB', created: 5 }),
  chatModel({ id: 'famB-y', family: 'famB', created: 7, status: 'retired' }),
  chatModel({ id: 'svc-auto', family: 'svc', rates: { input: 50, output: 50 } }),
  { ...chatModel({ id: 'famC-embed', family: 'famC' }), kind: 'embedding' },
];

const report = (records: readonly SettlementRecord[], now = T0 + 40 * MIN) =>
  buildUsageReport({ now, models, rows: rowsOf(records), recentFaults: faultsOf(records) });

describe('the usage aggregates settlement writes', () => {
  it('keep the caller’s own errors out of the minute counters', () => {
    const subjects = (r: SettlementRecord) => aggregatesFor(r).map((i) => i.subject);
    expect(subjects(failed('rate_limited', 429, 'client'))).not.toContain('minutes#12');
    expect(subjects(call())).toContain('minutes#12');
  });

  it('count a minute’s calls, its 5xx, its overloads and its no-eligible-model 503s apart', () => {
    const minuteCounters = (r: SettlementRecord) =>
      aggregatesFor(r).find((i) => i.subject === 'minutes#12')?.counters;
    const at = T0 + 7 * MIN;
    expect(minuteCounters(call({ at }))).toEqual({ r07: 1 });
    expect(minuteCounters(failed('upstream_error', 500, 'server_error', { at }))).toEqual({ r07: 1, e07: 1 });
    expect(minuteCounters(failed('stream_interrupted', 200, 'dropped', { at }))).toEqual({ r07: 1, e07: 1 });
    // Overload is counted apart: a failed call, not on its own an outage.
    expect(minuteCounters(failed('overloaded', 429, 'overloaded', { at }))).toEqual({ r07: 1, o07: 1 });
    expect(minuteCounters(failed('unavailable', 503, 'accounting', { at }))).toEqual({ r07: 1, e07: 1 });
    expect(
      minuteCounters(failed('unavailable', 503, 'registry_empty', { at, model: null, accountId: null })),
    ).toEqual({ r07: 1, u07: 1 });
  });

  it('put a call’s minute and fault on the day it ended, its model row and funnel on the day it arrived', () => {
    const lateEvening = Date.UTC(2026, 10, 21, 23, 59, 30);
    const broken = failed('stream_interrupted', 200, 'dropped', {
      timings: { receivedAt: lateEvening, firstByteMs: 5, totalMs: 50_000 },
    });
    expect(aggregatesFor(broken).map((i) => [i.day, i.subject])).toEqual([
      ['2026-11-21', 'model#famA-a'],
      ['2026-11-21', 'status#famA-a#500'],
      ['2026-11-22', 'minutes#00'],
    ]);
    expect(faultFor(broken)).toMatchObject({ day: '2026-11-22', at: lateEvening + 50_000 });
  });

  it('file an empty registry’s 503 under `incident`, a model without an eligible deployment under the model, the store’s under `platform`', () => {
    expect(faultFor(failed('unavailable', 503, 'registry_empty', { model: null }))?.group).toBe('incident');
    expect(faultFor(failed('unavailable', 503, 'no_eligible_model'))?.group).toBe('famA-a');
    expect(faultFor(failed('unavailable', 503, 'circuits_open'))?.group).toBe('famA-a');
    expect(faultFor(failed('unavailable', 503, 'accounting'))?.group).toBe('platform');
  });

  it('count a fault in the model’s row only when it is filed under the model, not the platform’s', () => {
    const rowFaults = (r: SettlementRecord) =>
      aggregatesFor(r).find((i) => i.subject === 'model#famA-a')?.counters.faults;
    expect(rowFaults(failed('upstream_error', 500, 'server_error'))).toBe(1);
    expect(rowFaults(failed('unavailable', 503, 'no_eligible_model'))).toBe(1);
    expect(rowFaults(failed('unavailable', 503, 'accounting'))).toBe(0);
    expect(rowFaults(failed('internal_error', 500, 'internal'))).toBe(0);
    expect(rowFaults(failed('upstream_error', 500, 'deadline'))).toBe(0);
  });

  it('let no stream of calls to an unwired model hide an outage of the models that are served', () => {
    // famA-a fails every call for five minutes; a key holder meanwhile calls a model with no deployment, 36 a minute.
    const outage = Array.from({ length: 50 }, (_, i) =>
      failed('upstream_error', 500, 'server_error', { at: T0 + 10 * MIN + i * 6 * SEC }),
    );
    const noise = Array.from({ length: 180 }, (_, i) =>
      failed('unavailable', 503, 'no_eligible_model', {
        model: 'famB-x',
        at: T0 + 10 * MIN + i * ((5 * SEC) / 3),
      }),
    );
    const r = report([...outage, ...noise]);
    expect(r.incidents).toEqual([expect.objectContaining({ severity: 'MAJOR', downtime_minutes: 5 })]);
  });

  it('count a model without an eligible deployment as that model’s fault, never as downtime', () => {
    const at = T0 + 7 * MIN;
    const unwired = failed('unavailable', 503, 'no_eligible_model', { at });
    // Not among the calls the platform was asked to serve either: counted there, they diluted an outage's rate.
    expect(aggregatesFor(unwired).find((i) => i.subject === 'minutes#12')).toBeUndefined();
    // A key holder calling it once a minute for half an hour, on a platform serving nothing else.
    const calls = Array.from({ length: 30 }, (_, i) =>
      failed('unavailable', 503, 'no_eligible_model', { at: T0 + i * MIN }),
    );
    const r = report(calls);
    expect(r.incidents).toEqual([]);
    expect(r.totals.downtime_minutes).toBe(0);
    expect(r.models.find((m) => m.id === 'famA-a')).toMatchObject({
      faults: 30,
      status: 'degraded recently',
    });
  });

  it('file a call cut at its deadline under `platform`, as no downtime and in words of its own', () => {
    const at = T0 + 7 * MIN;
    const cut = failed('upstream_error', 500, 'deadline', { at });
    expect(aggregatesFor(cut).find((i) => i.subject === 'minutes#12')).toBeUndefined();
    expect(faultFor(cut)).toMatchObject({
      group: 'platform',
      status: 500,
      detail: 'no upstream answered within the longest time a call may take (0 attempts)',
    });
    // However many: the platform was serving; those calls outlasted what a call may take.
    const cuts = Array.from({ length: 10 }, (_, i) =>
      failed('upstream_error', 500, 'deadline', { at: at + i }),
    );
    expect(report(cuts).incidents).toEqual([]);
  });

  it('write fault details from fixed words, never from a message', () => {
    const details = [
      failed('client_error', 404, 'client', { model: null }),
      failed('client_error', 400, 'client', { model: null }),
      failed('unauthenticated', 401, 'client', { model: null }),
      failed('insufficient_balance', 402, 'client'),
      failed('rate_limited', 429, 'client'),
      failed('upstream_error', 500, 'server_error', {
        attempts: [
          {
            deployment: 'd1',
            provider: 'p1',
            keyIndex: 0,
            outcome: 'server_error',
            status: 500,
            ms: 1,
            detail: 'x',
          },
          {
            deployment: 'd2',
            provider: 'p2',
            keyIndex: 0,
            outcome: 'server_error',
            status: 500,
            ms: 1,
            detail: 'x',
          },
        ],
      }),
      failed('overloaded', 429, 'overloaded'),
      failed('stream_interrupted', 200, 'dropped'),
      failed('unavailable', 503, 'registry_empty', { model: null }),
      failed('unavailable', 503, 'no_eligible_model'),
      failed('unavailable', 503, 'accounting'),
      failed('internal_error', 500, 'internal'),
    ].map(faultDetail);
    expect(details).toEqual([
      'model not found',
      'invalid request',
      'missing or invalid API key',
      'insufficient wallet balance',
      'rate limit of the account’s tier',
      'every deployment failed (2 attempts; last: upstream server error)',
      'every deployment overloaded (circuits open)',
      'stream interrupted after the first byte: connection dropped',
      'no eligible model: the model registry is empty',
      'no eligible model: no deployment can serve it',
      'accounting store unavailable: refused rather than served unmetered',
      'internal error',
    ]);
    // Keys that could not be read sent nothing: no deployment "failed", and no upstream refused a key. A refused
    // key (401) after a server error is said as before.
    const attempt = (outcome: 'auth' | 'server_error', status: number | null) => ({
      deployment: 'd1',
      provider: 'p1',
      keyIndex: 0,
      outcome,
      status,
      ms: 1,
      detail: 'x',
    });
    expect(faultDetail(failed('upstream_error', 500, 'auth', { attempts: [attempt('auth', null)] }))).toBe(
      'no deployment could be called (last: upstream key unavailable)',
    );
    expect(
      faultDetail(
        failed('upstream_error', 500, 'auth', {
          attempts: [attempt('server_error', 500), attempt('auth', 401)],
        }),
      ),
    ).toBe('every deployment failed (2 attempts; last: upstream key refused)');
  });

  it('name subjects the report can read back', () => {
    expect(parseSubject('model#famA-a')).toEqual({ type: 'model', model: 'famA-a' });
    expect(parseSubject('model#-')).toEqual({ type: 'model', model: null });
    expect(parseSubject('status#agent-error#429')).toEqual({
      type: 'status',
      group: 'agent-error',
      status: 429,
    });
    expect(parseSubject('status#famA-v4.1-flash#500')).toEqual({
      type: 'status',
      group: 'famA-v4.1-flash',
      status: 500,
    });
    expect(parseSubject('minutes#07')).toEqual({ type: 'minutes', hour: 7 });
    expect(parseSubject('minutes#24')).toEqual({ type: 'unknown' });
    expect(parseSubject('something#else')).toEqual({ type: 'unknown' });
  });
});

describe('buildUsageReport', () => {
  const workload = [
    call(),
    call({ at: T0 + 1000 }),
    call({ model: 'famB-x', usage: { ...USAGE, promptTokens: 100, completionTokens: 1 } }),
    // Two days ago: tokens on that day, and a fault that is not "recent".
    call({ at: T0 - 2 * DAY }),
    failed('upstream_error', 500, 'server_error', { model: 'famB-x', at: T0 - 2 * DAY }),
    failed('client_error', 400, 'client', { model: null, accountId: null, at: T0 + 2000 }),
    failed('rate_limited', 429, 'client', { at: T0 + 3000 }),
    failed('stream_interrupted', 200, 'dropped', { at: T0 + 4000 }),
    failed('unavailable', 503, 'registry_empty', { model: null, accountId: null, at: T0 + 20 * MIN }),
    // Outside the 30-day window: ignored.
    call({ at: T0 - 31 * DAY }),
  ];

  it('totals every settled call, the tokens of successes, active models and serving days', () => {
    const r = report(workload);
    expect(r.totals).toEqual({
      requests: 9,
      tokens: 15 + 15 + 101 + 15,
      models_active: 2,
      days_serving: 2,
      uptime_percent: 99.997,
      downtime_minutes: 1,
    });
    expect(r.generated_at).toBe('2026-11-22T12:40:00.000Z');
    expect(r.window).toEqual({
      days: 30,
      start: '2026-10-24T00:00:00.000Z',
      end: '2026-11-22T12:40:00.000Z',
    });
  });

  it('gives tokens for each of the 30 UTC days, zero included', () => {
    const r = report(workload);
    expect(r.tokens_per_day).toHaveLength(30);
    expect(r.tokens_per_day.map((d) => d.day)).toEqual(windowDays(T0));
    expect(r.tokens_per_day.at(-1)).toEqual({ day: '2026-11-22', tokens: 131 });
    expect(r.tokens_per_day.at(-3)).toEqual({ day: '2026-11-20', tokens: 15 });
    expect(r.tokens_per_day.filter((d) => d.tokens > 0)).toHaveLength(2);
  });

  it('rates each model by successes over successes and faults, and says how it has been', () => {
    const r = report(workload);
    expect(r.models).toEqual([
      // famA-a: 3 successes today and 2 days ago, one broken stream today; the 429 is the caller's.
      { id: 'famA-a', requests: 5, tokens: 45, uptime_percent: 75, faults: 1, status: 'degraded recently' },
      // famB-x: its only fault was two days ago.
      { id: 'famB-x', requests: 2, tokens: 101, uptime_percent: 50, faults: 1, status: 'up' },
      { id: 'famA-b', requests: 0, tokens: 0, uptime_percent: 100, faults: 0, status: 'live' },
      { id: 'famA-old', requests: 0, tokens: 0, uptime_percent: 100, faults: 0, status: 'live' },
      { id: 'famC-embed', requests: 0, tokens: 0, uptime_percent: 100, faults: 0, status: 'live' },
      { id: 'svc-auto', requests: 0, tokens: 0, uptime_percent: 100, faults: 0, status: 'live' },
    ]);
  });

  it('picks the newest active chat model of each family as its frontier, the priciest on a tie', () => {
    expect(report(workload).frontier_models).toEqual([
      { id: 'famA-b', family: 'famA', requests: 0, tokens: 0, status: 'live' },
      // famB-y is newer but retired; svc is the service's own family; famC's model is not a chat model.
      { id: 'famB-x', family: 'famB', requests: 2, tokens: 101, status: 'up' },
    ]);
  });

  it('funnels errors by model or pseudo-group and status, with labels', () => {
    expect(report(workload).error_funnel).toEqual([
      { group: 'agent-error', status: 400, count: 1, label: 'invalid request' },
      { group: 'agent-error', status: 429, count: 1, label: 'tier rate limit (not downtime)' },
      { group: 'famA-a', status: 500, count: 1, label: 'upstream fault after fallbacks' },
      { group: 'famB-x', status: 500, count: 1, label: 'upstream fault after fallbacks' },
      { group: 'incident', status: 503, count: 1, label: 'no eligible model (incident)' },
    ]);
  });

  it('labels each funnel cause in words that fit every way it arises', () => {
    // A model's own 503 comes from open circuits or from every deployment drained: the label names both.
    expect(funnelLabel('famA-a', 503)).toBe('no deployment available (circuits open or drained)');
    expect(funnelLabel('famA-a', 429)).toBe('upstream overloaded');
    expect(funnelLabel('famA-a', 502)).toBe('upstream fault after fallbacks');
    expect(funnelLabel('platform', 503)).toBe('accounting store unavailable');
    expect(funnelLabel('agent-error', 402)).toBe('insufficient balance');
    expect(funnelLabel('agent-error', 418)).toBe('client error');
  });

  it('lists incidents from the minute counters, and recent faults newest first', () => {
    const r = report(workload);
    expect(r.incidents).toEqual([
      {
        name: 'Service unavailable: no eligible model (503)',
        severity: 'MAJOR',
        status: 'RESOLVED',
        start: '2026-11-22T12:20:00.000Z',
        end: '2026-11-22T12:21:00.000Z',
        downtime_minutes: 1,
      },
    ]);
    expect(report(workload, T0 + 22 * MIN).incidents[0]).toMatchObject({ status: 'ONGOING', end: null });
    // Dated when each call ended: 10 ms after it arrived.
    expect(r.recent_faults.map((f) => [f.at, f.group, f.status])).toEqual([
      ['2026-11-22T12:20:00.000Z', 'incident', 503],
      ['2026-11-22T12:00:04.000Z', 'famA-a', 500],
      ['2026-11-20T12:00:00.000Z', 'famB-x', 500],
    ]);
  });

  it('lists no caller errors among the recent faults, however many there are', () => {
    const flood = Array.from({ length: 50 }, (_, i) =>
      failed('unauthenticated', 401, 'client', { at: T0 + 60_000 + i * 1000, model: null }),
    );
    for (const record of flood) expect(faultFor(record)).toBeNull();
    const r = report([...workload, ...flood]);
    expect(r.recent_faults.map((f) => f.group)).toEqual(['incident', 'famA-a', 'famB-x']);
    // Still counted where they belong: the error funnel.
    expect(r.error_funnel).toContainEqual(
      expect.objectContaining({ group: 'agent-error', status: 401, count: 50 }),
    );
    // Entries stored before this change are left out when the report is built.
    const stored = {
      at: T0,
      day: '2026-11-22',
      requestId: 'r',
      group: 'agent-error',
      status: 401,
      detail: 'x',
    };
    expect(
      buildUsageReport({ now: T0 + MIN, models, rows: [], recentFaults: [stored] }).recent_faults,
    ).toEqual([]);
  });

  it('calls a model whose every call in the window failed degraded, however long ago, and one never measured live', () => {
    const r = report([
      failed('upstream_error', 500, 'server_error', { model: 'famA-b', at: T0 - 2 * DAY }),
      failed('insufficient_balance', 402, 'client', { model: 'famA-a' }),
    ]);
    expect(r.models.find((m) => m.id === 'famA-b')).toMatchObject({
      uptime_percent: 0,
      status: 'degraded recently',
    });
    // A caller's own error measures nothing about the model.
    expect(r.models.find((m) => m.id === 'famA-a')?.status).toBe('live');
  });

  it('keeps the row of a model called in the window and no longer served, marked retired whatever its calls did', () => {
    const r = report([
      call({ model: 'famB-y' }),
      failed('upstream_error', 500, 'server_error', { model: 'famB-y' }),
      // Gone from the registry altogether since.
      call({ model: 'famZ-gone' }),
    ]);
    expect(r.models.find((m) => m.id === 'famB-y')).toEqual({
      id: 'famB-y',
      requests: 2,
      tokens: expect.any(Number),
      uptime_percent: 50,
      faults: 1,
      status: 'retired',
    });
    expect(r.models.find((m) => m.id === 'famZ-gone')?.status).toBe('retired');
    // Only models it serves have the statuses of a model to call.
    expect(
      r.models
        .filter((m) => m.status === 'retired')
        .map((m) => m.id)
        .sort(),
    ).toEqual(['famB-y', 'famZ-gone']);
  });

  it('retires nothing when the registry reads as empty: its models answer 503 meanwhile, and come back', () => {
    const records = [
      call({ model: 'famA-a' }),
      failed('unavailable', 503, 'registry_empty', { model: 'famA-a' }),
    ];
    const input = (rs: readonly SettlementRecord[], listed: readonly Model[]) => ({
      now: T0 + 40 * MIN,
      models: listed,
      rows: rowsOf(rs),
      recentFaults: faultsOf(rs),
    });
    const r = buildUsageReport(input(records, []));
    expect(r.models.find((m) => m.id === 'famA-a')?.status).toBe('degraded recently');
    // A model the registry lists as retired is retired, whatever else it reads.
    const retiredOnly = models.filter((m) => m.status === 'retired');
    const listedRetired = buildUsageReport(input([call({ model: 'famB-y' })], retiredOnly));
    expect(listedRetired.models.find((m) => m.id === 'famB-y')?.status).toBe('retired');
  });

  it('judges only whole minutes: not the one that starts at its moment, nor the one under way', () => {
    const outage = Array.from({ length: 4 }, (_, i) =>
      failed('upstream_error', 500, 'server_error', { at: T0 + 20 * MIN + i * 10 * SEC }),
    );
    // Those calls ended after 12:20:00 — and until 12:21:00 their minute is still under way.
    expect(report(outage, T0 + 20 * MIN).incidents).toEqual([]);
    expect(report(outage, T0 + 20 * MIN + 50 * SEC).incidents).toEqual([]);
    expect(report(outage, T0 + 21 * MIN).incidents).toHaveLength(1);
  });

  it('judges the window’s first minutes over their whole lookback, read from the day before and counted nowhere', () => {
    // As of T0 the window starts at midnight on 2026-10-24; its first minutes look back into 23:56–23:59 before it.
    const midnight = Date.UTC(2026, 9, 24);
    expect(lookbackHour(T0)).toEqual({ day: '2026-10-23', hour: 23 });
    const fault = (at: number) => failed('upstream_error', 500, 'server_error', { at });
    const asOfT0 = (rows: AggregateRow[], lookback?: AggregateRow[]) =>
      buildUsageReport({ now: T0, models, rows, recentFaults: [], ...(lookback ? { lookback } : {}) });

    // An outage across midnight: a failed call in each of the day's last three minutes, one more in the window's
    // first. The day before's rows are all passed, to show none of them is counted.
    const outage = asOfT0(
      rowsOf([fault(midnight + SEC)]),
      rowsOf([1, 2, 3].map((i) => fault(midnight - i * MIN))),
    );
    expect(outage.incidents).toEqual([
      expect.objectContaining({ start: '2026-10-24T00:00:00.000Z', end: '2026-10-24T00:01:00.000Z' }),
    ]);
    expect(outage.totals).toMatchObject({ requests: 1, downtime_minutes: 1 });
    expect(outage.error_funnel).toEqual([
      expect.objectContaining({ group: 'famA-a', status: 500, count: 1 }),
    ]);
    // Without the day before, the first minute had its own fault only: under the three the rule asks for.
    expect(asOfT0(rowsOf([fault(midnight + SEC)])).incidents).toEqual([]);

    // And a busy end of the day dilutes the window's first failures, as earlier calls do any other minute's.
    const failures = rowsOf([1, 2, 3].map((i) => fault(midnight + i * SEC)));
    const busy = rowsOf(Array.from({ length: 20 }, (_, i) => call({ at: midnight - 2 * MIN + i * SEC })));
    expect(asOfT0(failures, busy).incidents).toEqual([]);
    expect(asOfT0(failures).incidents).toHaveLength(1);
  });

  it('rates the platform over the minutes its window measured', () => {
    // 00:30 UTC: 29 whole days and 30 minutes since the window's first midnight, 41,790 minutes.
    const now = Date.UTC(2026, 10, 22, 0, 30);
    const outage = Array.from({ length: 600 }, (_, i) =>
      failed('unavailable', 503, 'registry_empty', {
        model: null,
        accountId: null,
        at: Date.UTC(2026, 10, 21, 10, 0) + i * MIN,
      }),
    );
    const r = buildUsageReport({ now, models, rows: rowsOf(outage), recentFaults: faultsOf(outage) });
    expect(r.totals.downtime_minutes).toBe(600);
    // (41,790 − 600) / 41,790, rounded down; over 43,200 minutes it read 98.611.
    expect(r.totals.uptime_percent).toBe(98.564);
  });

  it('counts the uptime probe’s failed checks as downtime of a platform that settled nothing, and nowhere else', () => {
    // A platform that answered nothing from 12:10 to 12:14: no call settled, each probe round failed all five checks.
    const rounds: ProbeRound[] = [10, 11, 12, 13].map((i) => ({
      at: T0 + i * MIN + 2 * SEC,
      checks: 5,
      failures: Array.from({ length: 5 }, (_, k) => ({ index: k, check: `check ${k}`, reason: 'no answer' })),
    }));
    const rows = rounds.map(probeIncrement).filter((i) => i !== null);
    expect(rows[0]).toEqual({
      day: '2026-11-22',
      subject: 'minutes#12',
      counters: { pc10: 5, pf10: 0b11111 },
    });
    // The store sums a subject's items: the probe's item beside the settled calls' shards.
    const stored: AggregateRow = {
      day: '2026-11-22',
      subject: 'minutes#12',
      counters: Object.assign({}, ...rows.map((r) => r.counters)),
    };
    const r = buildUsageReport({ now: T0 + 40 * MIN, models, rows: [stored], recentFaults: [] });
    expect(r.incidents).toEqual([
      expect.objectContaining({
        name: 'Service unreachable: every uptime check failed',
        severity: 'MAJOR',
        start: '2026-11-22T12:12:00.000Z',
        end: '2026-11-22T12:14:00.000Z',
        downtime_minutes: 2,
      }),
    ]);
    expect(r.totals).toMatchObject({ requests: 0, downtime_minutes: 2 });
    expect(r.totals.uptime_percent).toBeLessThan(100);
    // Checks are not calls: no funnel row, no recent fault, no model's fault.
    expect(r.error_funnel).toEqual([]);
    expect(r.recent_faults).toEqual([]);
    expect(r.models.every((m) => m.faults === 0)).toBe(true);
    // A round that found everything answering files nothing.
    expect(probeIncrement({ at: T0, checks: 5, failures: [] })).toBeNull();
  });

  it('is as of its moment: nothing after it counts as an incident or a recent fault', () => {
    const outage = Array.from({ length: 4 }, (_, i) =>
      failed('upstream_error', 500, 'server_error', { at: T0 + 20 * MIN + i * 1000 }),
    );
    const before = report(outage, T0 + 10 * MIN);
    expect(before.incidents).toEqual([]);
    expect(before.recent_faults).toEqual([]);
    const after = report(outage, T0 + 21 * MIN);
    expect(after.incidents).toHaveLength(1);
    expect(after.recent_faults).toHaveLength(4);
  });

  it('lists at most the 20 most recent faults', () => {
    const many = Array.from({ length: 25 }, (_, i) =>
      failed('upstream_error', 500, 'server_error', { at: T0 + i * 1000 }),
    );
    const r = report(many);
    expect(r.recent_faults).toHaveLength(20);
    // To the second, not the millisecond a stranger's call failed.
    expect(r.recent_faults[0]?.at).toBe('2026-11-22T12:00:24.000Z');
  });

  it('dates a fault, and counts its minute, when the call failed, not when it arrived', () => {
    const took = (at: number, ms: number) => ({
      at,
      timings: { receivedAt: at, firstByteMs: 5, totalMs: ms },
    });
    const records = [
      // Minute 0: one quick success, and three streams that began in it and broke 65 s later, in minute 1.
      call(),
      ...[1, 2, 3].map((i) => failed('stream_interrupted', 200, 'dropped', took(T0 + i * SEC, 65 * SEC))),
      // A slow call that arrived in minute 0 and failed in minute 2; a quick one that failed in minute 1.
      failed('upstream_error', 500, 'server_error', took(T0 + 4 * SEC, 2 * MIN + 30 * SEC)),
      failed('upstream_error', 500, 'server_error', took(T0 + MIN + 30 * SEC, 10)),
    ];
    // As of 12:00:50 minute 0 was clean, nothing having failed yet; it stays clean once the failures are settled:
    // the outage is minutes 1 and 2, when the calls failed.
    expect(report(records.slice(0, 1), T0 + 50 * SEC).incidents).toEqual([]);
    const r = report(records);
    expect(r.incidents).toEqual([
      expect.objectContaining({
        start: '2026-11-22T12:01:00.000Z',
        end: '2026-11-22T12:03:00.000Z',
        downtime_minutes: 2,
      }),
    ]);
    // Newest failure first, whenever the calls arrived.
    expect(r.recent_faults.map((f) => f.at)).toEqual([
      '2026-11-22T12:02:34.000Z',
      '2026-11-22T12:01:30.000Z',
      '2026-11-22T12:01:08.000Z',
      '2026-11-22T12:01:07.000Z',
      '2026-11-22T12:01:06.000Z',
    ]);
    // A report as of a moment after the calls arrived but before they failed lists none of them.
    expect(report(records, T0 + 50 * SEC).recent_faults).toEqual([]);

    const minuteCounters = (r: SettlementRecord) =>
      aggregatesFor(r).find((i) => i.subject.startsWith('minutes#'))?.counters;
    expect(minuteCounters(records[1] as SettlementRecord)).toEqual({ r01: 1, e01: 1 });
    expect(minuteCounters(records[4] as SettlementRecord)).toEqual({ r02: 1, e02: 1 });
  });

  it('says nothing of accounts, keys or what callers sent', () => {
    const text = JSON.stringify(report(workload));
    for (const secret of ['acct_', 'svc_live_', 'Sekr1t', 'secret42', 'private', 'req_'])
      expect(text).not.toContain(secret);
  });

  it('is an empty but complete report before any traffic', () => {
    const r = buildUsageReport({ now: T0, models, rows: [], recentFaults: [] });
    expect(r.totals).toEqual({
      requests: 0,
      tokens: 0,
      models_active: 0,
      days_serving: 0,
      uptime_percent: 100,
      downtime_minutes: 0,
    });
    expect(r.incidents).toEqual([]);
    expect(r.models.every((m) => m.status === 'live')).toBe(true);
  });
});
