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

export interface UsageReportDeps {
  readonly usage: UsageSource;
  /** The registry's models, read fresh on every run (the registry is small). */
  readonly models: () => Promise<readonly Model[]>;
  readonly site: SitePublisher;
  readonly clock: Clock;
  readonly log: Logger;
}

/** What a run published (the report itself is in the bucket). */
export interface UsageReportSummary {
  readonly key: string;
  readonly generatedAt: string;
  readonly requests: number;
  readonly incidents: number;
  readonly bytes: number;
}

/** EventBridge's scheduled event carries `time`; an on-demand invocation may pass one too. */
export interface UsageReportEvent {
  readonly time?: string;
}

/** Reads the usage table and the registry, builds the report, validates it, and publishes it. */
export const publishUsageReport = async (deps: UsageReportDeps, now: number): Promise<UsageReport> => {
  const days = windowDays(now);
  const [rows, recentFaults, models] = await Promise.all([
    deps.usage.rows(days),
    deps.usage.recentFaults([...days].reverse(), RECENT_FAULTS, now),
    deps.models(),
  ]);
  // A report the published schema would reject is a bug: fail the run, keep the last good report online.
  const report = usageReportSchema.parse(buildUsageReport({ now, models, rows, recentFaults }));
  await deps.site.putJson(USAGE_REPORT_KEY, JSON.stringify(report), USAGE_REPORT_CACHE_CONTROL);
  return report;
};

/**
 * Scheduled (EventBridge, every few minutes): publishes `usage.json` to the site bucket. The report is as of
 * the event's `time` — the schedule's tick, or a time an operator or a test asks for.
 */
export const createHandler = (deps: () => UsageReportDeps) =>
  middy<UsageReportEvent, UsageReportSummary>().handler(async (event) => {
    const d = deps();
    const requested = event?.time === undefined ? Number.NaN : Date.parse(event.time);
    const now = Number.isFinite(requested) ? requested : d.clock.now();
    const report = await publishUsageReport(d, now);
    const summary: UsageReportSummary = {
      key: USAGE_REPORT_KEY,
      generatedAt: report.generated_at,
      requests: report.totals.requests,
      incidents: report.incidents.length,
      bytes: Buffer.byteLength(JSON.stringify(report)),
    };
    d.log.info('usage report published', { ...summary });
    return summary;
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
