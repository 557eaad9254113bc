import { describe, expect, it } from 'vitest';
import { buildUsageReport } from '#core/usage-report.ts';
import { usageReportJsonSchema, usageReportSchema } from '#http/schemas/usage-report.ts';
import { chatModel } from '#test/fixtures.ts';
import { publishedUsageSchema, usageSchemaErrors } from '#test/usage-schema.ts';

const T0 = Date.UTC(2026, 10, 22, 12, 0);

/** A report with something in every list. */
const fullReport = () =>
  buildUsageReport({
    now: T0 + 23 * 60_000,
    models: [chatModel({ id: 'famA-a', family: 'famA' })],
    rows: [
      {
        day: '2026-11-22',
        subject: 'model#famA-a',
        counters: { requests: 5, successes: 3, faults: 1, tokens: 45 },
      },
      {
        day: '2026-11-22',
        subject: 'model#-',
        counters: { requests: 2, successes: 0, faults: 1, tokens: 0 },
      },
      { day: '2026-11-22', subject: 'status#agent-error#401', counters: { count: 1 } },
      { day: '2026-11-22', subject: 'status#incident#503', counters: { count: 1 } },
      { day: '2026-11-22', subject: 'minutes#12', counters: { r00: 4, r20: 1, u20: 1 } },
    ],
    recentFaults: [
      {
        at: T0 + 20 * 60_000,
        day: '2026-11-22',
        requestId: 'req_1',
        group: 'incident',
        status: 503,
        detail: 'no eligible model: the model registry is empty',
      },
    ],
  });

describe('the published usage schema (site/usage.schema.json)', () => {
  it('is the JSON Schema of the zod schema the report is validated with (npm run usage-schema)', () => {
    expect(publishedUsageSchema()).toEqual(usageReportJsonSchema());
  });

  it('accepts what the builder produces, ongoing incidents and empty reports included', () => {
    const report = fullReport();
    expect(report.incidents).toHaveLength(1);
    expect(report.incidents[0]?.end).toBeNull();
    expect(usageSchemaErrors(report)).toBeNull();
    expect(usageReportSchema.safeParse(report).success).toBe(true);
    const empty = buildUsageReport({ now: T0, models: [], rows: [], recentFaults: [] });
    expect(usageSchemaErrors(empty)).toBeNull();
  });

  it('rejects what a consumer could not rely on: unknown fields, bad enums, negative counts, bad times', () => {
    const report = fullReport();
    const broken = [
      { ...report, account_id: 'acct_1' },
      { ...report, totals: { ...report.totals, requests: -1 } },
      { ...report, totals: { ...report.totals, uptime_percent: 100.5 } },
      { ...report, generated_at: '22/11/2026 12:30' },
      { ...report, models: [{ ...report.models[0], status: 'down' }] },
      { ...report, incidents: [{ ...report.incidents[0], severity: 'CRITICAL' }] },
      { ...report, tokens_per_day: [{ day: '2026-13-01', tokens: 1 }] },
      { ...report, recent_faults: Array.from({ length: 21 }, () => report.recent_faults[0]) },
    ];
    for (const document of broken) {
      expect(usageSchemaErrors(document)).not.toBeNull();
      expect(usageReportSchema.safeParse(document).success).toBe(false);
    }
  });
});
