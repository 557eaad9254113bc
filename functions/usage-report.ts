import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { S3Client, type S3ClientConfig } from '@aws-sdk/client-s3';
import middy from '@middy/core';
import { boundedRequests } from '#adapters/aws-clients.ts';
import { DynamoRegistry } from '#adapters/dynamo-registry.ts';
import { DynamoUsage } from '#adapters/dynamo-usage.ts';
import { createLogger, type Logger } from '#adapters/logger.ts';
import { S3SitePublisher } from '#adapters/s3-site.ts';
import type { Clock } from '#core/ports.ts';
import type { Model } from '#core/registry.ts';
import {
  buildUsageReport,
  generatedAtOf,
  lookbackHour,
  RECENT_FAULTS,
  type SitePublisher,
  type UsageReport,
  type UsageSource,
  windowDays,
} from '#core/usage-report.ts';
import { usageReportSchema } from '#http/schemas/usage-report.ts';
import { buckets } from '#lib/resources.ts';
import { type Config, loadConfig } from './config.ts';

/** Where the report lives in the site bucket, and how long browsers and CloudFront may keep it. */
const USAGE_REPORT_KEY = buckets.site.usageReportKey;
export const USAGE_REPORT_CACHE_CONTROL = 'public, max-age=60';

/**
 * A report online dated this far past the run's own clock is not newer but wrong (a tick with a bad time): the run
 * replaces it rather than leave the page frozen until that time comes.
 */
const FUTURE_SLACK_MS = 5 * 60_000;
/** Read-compare-put rounds when another run writes between this one's read and its put (S3 refuses the put). */
const PUBLISH_ATTEMPTS = 3;

export interface UsageReportDeps {
  readonly usage: UsageSource;
  /** The registry's models, read fresh on every run (the registry is small). */
  readonly models: () => Promise<readonly Model[]>;
  readonly site: SitePublisher;
  readonly clock: Clock;
  readonly log: Logger;
}

/**
 * What became of the report: `published` at the key; `superseded`, left unwritten because the report online is
 * newer (a slow run finishing after the next one); `replayed`, as of an operator's `time`, returned and not
 * published.
 */
export type UsageReportOutcome = 'published' | 'superseded' | 'replayed';

/** What a run did (a published report is in the bucket; a replayed one is in the answer). */
export interface UsageReportSummary {
  readonly outcome: UsageReportOutcome;
  /** The key written; null when none was. */
  readonly key: string | null;
  readonly generatedAt: string;
  readonly requests: number;
  readonly incidents: number;
  readonly bytes: number;
  /** A replay's report: the operator's copy, the public one being left as it is. */
  readonly report?: UsageReport;
}

/**
 * What invokes the function. The schedule's tick names its source and its `time`: EventBridge Scheduler's default
 * notification (lib/jobs-stack.ts sets no input) is `{ source: 'aws.scheduler', 'detail-type': 'Scheduled Event',
 * time, … }`, an EventBridge rule's scheduled event the same with `aws.events`. An operator's invocation names no
 * source: without a `time` it publishes as of now; with one, it replays that moment.
 */
export interface UsageReportEvent {
  readonly time?: string;
  readonly source?: string;
  readonly 'detail-type'?: string;
}

/** The sources of a schedule's tick, whose `time` is the moment the report is published as of. */
const SCHEDULE_SOURCES: ReadonlySet<string> = new Set(['aws.scheduler', 'aws.events']);

/** Reads the usage table and the registry and builds the report as of `now`, validated. */
export const buildReport = async (deps: UsageReportDeps, now: number): Promise<UsageReport> => {
  const days = windowDays(now);
  const before = lookbackHour(now);
  const [rows, lookback, recentFaults, models] = await Promise.all([
    deps.usage.rows(days),
    deps.usage.minuteRows(before.day, before.hour),
    deps.usage.recentFaults([...days].reverse(), RECENT_FAULTS, now),
    deps.models(),
  ]);
  // A report the published schema would reject is a bug: fail the run, keep the last good report online.
  return usageReportSchema.parse(buildUsageReport({ now, models, rows, lookback, recentFaults }));
};

/**
 * Writes the report unless the one online is newer. Runs can overlap (a slow one may outlast the next tick: its
 * timeout is the schedule's period), and the last to finish must not put an older report over a fresher one. The
 * put is conditional on what was read (S3's If-Match, or If-None-Match with no object yet), so a run that writes in
 * between makes this one read and compare again. A report of the same moment is written (a rerun of a tick counts
 * the calls settled since), as is one over a body that names no time.
 */
export const publishNewest = async (
  site: SitePublisher,
  report: UsageReport,
  clockNow: number,
): Promise<'published' | 'superseded'> => {
  const at = Date.parse(report.generated_at);
  const body = JSON.stringify(report);
  for (let attempt = 1; attempt <= PUBLISH_ATTEMPTS; attempt++) {
    const stored = await site.get(USAGE_REPORT_KEY);
    const storedAt = stored === null ? Number.NaN : generatedAtOf(stored.body);
    if (storedAt > at && storedAt <= clockNow + FUTURE_SLACK_MS) return 'superseded';
    const expected = stored === null ? null : stored.etag;
    if (await site.putJson(USAGE_REPORT_KEY, body, USAGE_REPORT_CACHE_CONTROL, expected)) return 'published';
  }
  throw new Error(`${USAGE_REPORT_KEY} kept changing under ${PUBLISH_ATTEMPTS} attempts to publish`);
};

/** Builds the report as of `now` and publishes it unless a newer one is online. */
export const publishUsageReport = async (
  deps: UsageReportDeps,
  now: number,
): Promise<{ report: UsageReport; outcome: 'published' | 'superseded' }> => {
  const report = await buildReport(deps, now);
  return { report, outcome: await publishNewest(deps.site, report, deps.clock.now()) };
};

/**
 * Scheduled (every few minutes): publishes `usage.json` to the site bucket as of the tick's `time` (the tests drive
 * the schedule so), or of now when the event names none. Given a `time` by anyone else (an operator replaying a past
 * moment), it builds the report as of that time and returns it in its answer: a historical report is not the public
 * one's to replace.
 */
export const createHandler = (deps: () => UsageReportDeps) =>
  middy<UsageReportEvent, UsageReportSummary>().handler(async (event) => {
    const d = deps();
    const requested = event?.time === undefined ? Number.NaN : Date.parse(event.time);
    const replay = Number.isFinite(requested) && !SCHEDULE_SOURCES.has(event?.source ?? '');
    const now = Number.isFinite(requested) ? requested : d.clock.now();
    const { report, outcome } = replay
      ? { report: await buildReport(d, now), outcome: 'replayed' as const }
      : await publishUsageReport(d, now);
    const summary: UsageReportSummary = {
      outcome,
      key: outcome === 'published' ? USAGE_REPORT_KEY : null,
      generatedAt: report.generated_at,
      requests: report.totals.requests,
      incidents: report.incidents.length,
      bytes: Buffer.byteLength(JSON.stringify(report)),
    };
    if (outcome === 'superseded')
      d.log.warn('usage report not published: a newer one is online', { ...summary });
    else d.log.info(`usage report ${outcome}`, { ...summary });
    return replay ? { ...summary, report } : summary;
  });

export interface UsageReportDepsOptions {
  /** Explicit AWS client settings (the local host's emulator endpoints); Lambda uses the defaults. */
  readonly aws?: { readonly dynamodb?: DynamoDBClientConfig; readonly s3?: S3ClientConfig };
  readonly clock?: Clock;
  /** Local host only: instruments the DynamoDB client (its stand-in for the function's IAM grants). */
  readonly onDynamoClient?: (client: DynamoDBClient) => void;
}

/** The function's dependencies, from its configuration; `close` releases the clients. */
export const createUsageReportDeps = (
  config: Config,
  options: UsageReportDepsOptions = {},
): UsageReportDeps & { close(): void } => {
  if (!config.siteBucket) throw new Error(`Missing required environment variable ${buckets.site.envVar}`);
  // Bounded like the request path's: a store that stops answering would otherwise hold the run to its timeout.
  const dynamo = new DynamoDBClient({ maxAttempts: 3, ...boundedRequests(), ...options.aws?.dynamodb });
  options.onDynamoClient?.(dynamo);
  const s3 = new S3Client({ maxAttempts: 3, ...boundedRequests(), ...options.aws?.s3 });
  const registry = new DynamoRegistry(dynamo, config.tables.registry);
  return {
    usage: new DynamoUsage(dynamo, config.tables.usage),
    models: async () => (await registry.load()).models,
    site: new S3SitePublisher(s3, config.siteBucket),
    clock: options.clock ?? { now: () => Date.now() },
    log: createLogger(config.logLevel, { function: 'usage-report' }),
    close: () => {
      dynamo.destroy();
      s3.destroy();
    },
  };
};

let fromEnv: UsageReportDeps | undefined;

export const handler = createHandler(() => {
  fromEnv ??= createUsageReportDeps(loadConfig(process.env));
  return fromEnv;
});
