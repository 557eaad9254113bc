import { z } from 'zod';
import type { UsageReport } from '#core/usage-report.ts';

/**
 * `/usage.json` (spec §2.6). The report handler validates every report with this schema before publishing
 * it, and the site publishes the same schema as JSON Schema (`site/usage.schema.json`, generated from this
 * one by `npm run usage-schema`; a test keeps the two in step).
 */
const count = z.int().min(0);
const percent = z.number().min(0).max(100);
const timestamp = z.iso.datetime();
const modelStatus = z.enum(['up', 'degraded recently', 'live']);
/** A model row's: also `retired`, a model called in the window and no longer served. */
const rowStatus = z.enum([...modelStatus.options, 'retired']);
const group = z.string().min(1).describe('a model id or a pseudo-group: platform, incident, agent-error');
const httpStatus = z.int().min(100).max(599);

export const usageReportSchema = z
  .strictObject({
    version: z.literal(1),
    generated_at: timestamp,
    window: z.strictObject({ days: z.int().min(1), start: timestamp, end: timestamp }),
    totals: z.strictObject({
      requests: count.describe('settled POST calls on chat, embeddings and audio'),
      tokens: count.describe('prompt plus completion tokens of successful calls'),
      models_active: count.describe('models with at least one successful call'),
      days_serving: count.describe('UTC days with at least one successful call'),
      uptime_percent: percent.describe('share of the window outside incidents'),
      downtime_minutes: count,
    }),
    incidents: z.array(
      z.strictObject({
        name: z.string().min(1),
        severity: z.enum(['MAJOR', 'MINOR']),
        status: z.enum(['ONGOING', 'RESOLVED']),
        start: timestamp,
        end: timestamp.nullable().describe('null while the incident is ongoing'),
        downtime_minutes: count,
      }),
    ),
    tokens_per_day: z.array(z.strictObject({ day: z.iso.date(), tokens: count })),
    models: z.array(
      z.strictObject({
        id: z.string().min(1),
        requests: count,
        tokens: count,
        uptime_percent: percent.describe('successes / (successes + faults)'),
        faults: count,
        status: rowStatus,
      }),
    ),
    frontier_models: z.array(
      z.strictObject({
        id: z.string().min(1),
        family: z.string().min(1),
        requests: count,
        tokens: count,
        status: modelStatus,
      }),
    ),
    error_funnel: z.array(z.strictObject({ group, status: httpStatus, count, label: z.string().min(1) })),
    recent_faults: z
      .array(z.strictObject({ at: timestamp, group, status: httpStatus, detail: z.string().min(1) }))
      .max(20),
  })
  .meta({
    title: 'svc inference gateway: public usage report',
    description: 'Anonymous aggregates over a 30-day window (spec §2.6). No user, key or account data.',
  }) satisfies z.ZodType<UsageReport>;

/** The JSON Schema published as `site/usage.schema.json`. */
export const usageReportJsonSchema = (): Record<string, unknown> =>
  z.toJSONSchema(usageReportSchema, { target: 'draft-2020-12' }) as Record<string, unknown>;
