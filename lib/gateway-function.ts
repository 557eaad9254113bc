import { fileURLToPath } from 'node:url';
import { Duration, Stack } from 'aws-cdk-lib';
import { Alarm, ComparisonOperator, TreatMissingData } from 'aws-cdk-lib/aws-cloudwatch';
import { SnsAction } from 'aws-cdk-lib/aws-cloudwatch-actions';
import type { ITableV2 } from 'aws-cdk-lib/aws-dynamodb';
import { Role, ServicePrincipal } from 'aws-cdk-lib/aws-iam';
import {
  ApplicationLogLevel,
  Architecture,
  type CfnFunction,
  LoggingFormat,
  Runtime,
  SystemLogLevel,
  Tracing,
} from 'aws-cdk-lib/aws-lambda';
import { NodejsFunction, OutputFormat } from 'aws-cdk-lib/aws-lambda-nodejs';
import { FilterPattern, LogGroup, MetricFilter, type RetentionDays } from 'aws-cdk-lib/aws-logs';
import type { IBucket } from 'aws-cdk-lib/aws-s3';
import type { ISecret } from 'aws-cdk-lib/aws-secretsmanager';
import type { ITopic } from 'aws-cdk-lib/aws-sns';
import type { IQueue } from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { PROBE_BASE_URL_ENV } from '#core/uptime-probe.ts';
import { UNSENT_SETTLEMENT_PREFIX } from '#http/unsent-settlement.ts';
import {
  type BucketId,
  entryOf,
  type FunctionDefinition,
  type LogAlarm,
  memoryOf,
  type QueueId,
  timeoutOf,
} from './functions.ts';
import { keptInProduction } from './removal.ts';
import { buckets, queues, type TableId, tables } from './resources.ts';
import { rateMinutes, type StageConfig, scheduleContextKey } from './stage.ts';

/**
 * Source-mapped stack traces, and a larger young generation: the hot path allocates many short-lived objects
 * per request (events, headers, JSON), and 32 MB semi-spaces cut scavenges enough to lift throughput ~8 % in
 * the local benchmark. Well within the 512–1024 MB functions. `npm start` and the benchmark use the same flag.
 * (The other V8 setting the hot path relies on, no allocation-site pretenuring, is made in code at cold start —
 * functions/adapters/heap-tuning.ts — because NODE_OPTIONS does not accept it.)
 */
export const NODE_OPTIONS = '--enable-source-maps --max-semi-space-size=32';

/** The shared resources a function can be bound to; a stack passes the ones it can reach. */
export interface Bindings {
  readonly tables: Readonly<Record<TableId, ITableV2>>;
  readonly queues: Readonly<Record<QueueId, IQueue>>;
  readonly buckets: Readonly<Partial<Record<BucketId, IBucket>>>;
  readonly providerSecrets: readonly ISecret[];
  readonly alarmTopic: ITopic;
  /** The API's public base URL (the CDN's, ending in `/v1`): only the jobs stack, after the site stack, has it. */
  readonly publicBaseUrl?: string;
}

export interface GatewayFunctionProps {
  /** The row's key in the function table (`lib/functions.ts`), which is also the handler file's name. */
  readonly name: string;
  readonly definition: FunctionDefinition;
  readonly stage: StageConfig;
  readonly bindings: Bindings;
}

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/**
 * A settlement record the queue did not take (or had not acknowledged when the invocation ended) is logged whole
 * and caught by the handler, so the function's error metric never moves; unless it is replayed, the call is
 * never charged once the sweeper releases its hold. Each such line counts, and the first one alarms. Every function
 * that sends settlements has it.
 */
const UNSENT_SETTLEMENT_ALARM: LogAlarm = {
  id: 'unsent-settlements',
  prefix: UNSENT_SETTLEMENT_PREFIX,
  threshold: 1,
  description:
    'settlement records logged instead of sent in the last 5 minutes; ' +
    'replay them from the log (npm run admin -- settlements replay) before their holds expire',
};

/** Metadata key naming the handler file a function is bundled from (the infra tests match it to `functions/`). */
export const ENTRY_METADATA = 'svc:entry';

/**
 * How long API Gateway lets a streamed integration of a *regional* REST API (api-stack.ts) stay silent: 5 minutes,
 * fixed by AWS (30 s on an edge-optimized endpoint). A non-stream call sends nothing until it is done.
 */
export const REST_API_IDLE_TIMEOUT_MS = 5 * 60_000;

const APPLICATION_LOG_LEVEL: Record<string, ApplicationLogLevel> = {
  debug: ApplicationLogLevel.DEBUG,
  info: ApplicationLogLevel.INFO,
  warn: ApplicationLogLevel.WARN,
  error: ApplicationLogLevel.ERROR,
  silent: ApplicationLogLevel.FATAL,
};

/** The longest an alarm's periods may span together (CloudWatch: period × evaluation periods ≤ 7 days). */
const MAX_ALARM_WINDOW_MINUTES = 7 * 1_440;

/**
 * A log alarm's period in minutes: its own, 5 by default, or for `run` the interval of the function's schedule in
 * this stage — refused at synth when that is no `rate(…)` (a cron's runs have no one interval).
 */
const periodOf = (alarm: LogAlarm, definition: FunctionDefinition, stage: StageConfig): number => {
  if (alarm.periodMinutes !== 'run') return alarm.periodMinutes ?? 5;
  const trigger = definition.trigger;
  if (trigger.kind !== 'schedule')
    throw new Error(`log alarm ${alarm.id} counts runs of a function with no schedule`);
  const expression = stage.schedules[trigger.schedule];
  const minutes = rateMinutes(expression);
  // CloudWatch evaluates at most 7 days of periods: runs further apart could not be counted to the alarm's number.
  const periods = alarm.evaluationPeriods ?? 1;
  if (minutes === null || minutes * periods > MAX_ALARM_WINDOW_MINUTES)
    throw new Error(
      `CDK context "${scheduleContextKey(trigger.schedule)}" must be a rate(…) expression of at most ${Math.floor(MAX_ALARM_WINDOW_MINUTES / periods / 60)} hours: the ${alarm.id} alarm counts its last ${periods} runs, got ${JSON.stringify(expression)}`,
    );
  return minutes;
};

/**
 * One Lambda function of the gateway, with the defaults every function shares and its bindings:
 *
 * - Node.js 24 on arm64, bundled locally by esbuild (no Docker) into one ESM file with source maps, the AWS SDK
 *   included (the version the tests ran, not the runtime's).
 * - JSON logs into a log group of its own with the stage's retention; X-Ray active tracing.
 * - Its own role, which starts empty: log writes to its own group, X-Ray, and then exactly what the row declares —
 *   each declared table, queue, bucket or secret gets its grant and its environment variable together.
 * - Alarms on errors and throttles, sent to the stage's alarm topic.
 *
 * functions/config.ts reads every table name and the queue URL at cold start, for every function, so every
 * function gets all of them; a name or URL grants nothing, the role does (ADR 0007).
 */
export class GatewayFunction extends Construct {
  readonly function: NodejsFunction;

  constructor(scope: Construct, id: string, props: GatewayFunctionProps) {
    super(scope, id);
    const { name, definition, stage, bindings } = props;
    const functionName = `${stage.prefix}-${name}`;

    const logGroup = new LogGroup(this, 'logs', {
      logGroupName: `/aws/lambda/${functionName}`,
      retention: stage.logRetentionDays as RetentionDays,
      removalPolicy: keptInProduction(stage.production),
    });
    // No AWSLambdaBasicExecutionRole: it allows log writes to every log group (`*`); this role writes to one.
    const role = new Role(this, 'role', {
      assumedBy: new ServicePrincipal('lambda.amazonaws.com'),
      description: `${functionName} (${entryOf(name)})`,
    });
    logGroup.grantWrite(role);

    this.function = new NodejsFunction(this, 'function', {
      functionName,
      description: entryOf(name),
      entry: `${ROOT}${entryOf(name)}`,
      handler: 'handler',
      projectRoot: ROOT,
      depsLockFilePath: `${ROOT}package-lock.json`,
      runtime: Runtime.NODEJS_24_X,
      architecture: Architecture.ARM_64,
      memorySize: memoryOf(definition),
      timeout: Duration.seconds(timeoutOf(definition)),
      role,
      logGroup,
      loggingFormat: LoggingFormat.JSON,
      // Our logger already filters by LOG_LEVEL; Lambda's filter must not drop what it lets through.
      applicationLogLevelV2: APPLICATION_LOG_LEVEL[stage.logLevel] ?? ApplicationLogLevel.INFO,
      systemLogLevelV2: SystemLogLevel.INFO,
      tracing: Tracing.ACTIVE,
      environment: {
        // Stack traces point into functions/*.ts through the bundle's source map.
        NODE_OPTIONS: NODE_OPTIONS,
        ...stage.functionEnv,
        LOG_LEVEL: stage.logLevel,
        ...(stage.priceMinMargin === undefined ? {} : { PRICE_MIN_MARGIN: String(stage.priceMinMargin) }),
        // HTTP functions stop routing a call before what is in front of them gives up on it (config.ts): the
        // CDN's origin read timeout, and the regional REST API's idle timeout on a streamed integration.
        ...(definition.trigger.kind === 'http'
          ? {
              CDN_READ_TIMEOUT_MS: String(stage.cdnReadTimeoutSeconds * 1000),
              REST_API_IDLE_TIMEOUT_MS: String(REST_API_IDLE_TIMEOUT_MS),
            }
          : {}),
      },
      bundling: {
        forceDockerBundling: false,
        format: OutputFormat.ESM,
        target: 'node24',
        platform: 'node',
        mainFields: ['module', 'main'],
        // CommonJS dependencies (highland, undici, …) call require(); an ESM bundle has to provide it.
        banner:
          "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
        minify: true,
        keepNames: true,
        sourceMap: true,
        sourcesContent: false,
        externalModules: [],
        bundleAwsSDK: true,
      },
    });
    (this.function.node.defaultChild as CfnFunction).addMetadata(ENTRY_METADATA, entryOf(name));

    this.bind(name, definition, bindings);
    this.alarms(functionName, bindings.alarmTopic);
    const logAlarms = [
      ...(definition.uses.sendsTo?.includes('settlement') ? [UNSENT_SETTLEMENT_ALARM] : []),
      ...(definition.logAlarms ?? []),
    ];
    for (const alarm of logAlarms)
      this.logAlarm(functionName, logGroup, bindings.alarmTopic, alarm, periodOf(alarm, definition, stage));
  }

  /** Counts the log lines whose message begins with the alarm's prefix; `threshold` of them in a period breach it. */
  private logAlarm(
    functionName: string,
    logGroup: LogGroup,
    topic: ITopic,
    alarm: LogAlarm,
    periodMinutes: number,
  ): void {
    const filter = new MetricFilter(this, alarm.id, {
      logGroup,
      filterPattern: FilterPattern.stringValue('$.message', '=', `${alarm.prefix}*`),
      metricNamespace: 'InferenceGateway',
      metricName: `${functionName}-${alarm.id}`,
      metricValue: '1',
    });
    new Alarm(this, `${alarm.id}-alarm`, {
      alarmName: `${functionName}-${alarm.id}`,
      alarmDescription: `${functionName}: ${alarm.description}`,
      metric: filter.metric({ period: Duration.minutes(periodMinutes), statistic: 'Sum' }),
      threshold: alarm.threshold,
      evaluationPeriods: alarm.evaluationPeriods ?? 1,
      datapointsToAlarm: alarm.datapointsToAlarm ?? alarm.evaluationPeriods ?? 1,
      comparisonOperator: ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new SnsAction(topic));
  }

  /** Grants and environment variables, from the row's declared uses. */
  private bind(name: string, definition: FunctionDefinition, bindings: Bindings): void {
    const fn = this.function;
    const uses = definition.uses;
    for (const [id, definitionOf] of Object.entries(tables) as [TableId, (typeof tables)[TableId]][]) {
      const table = bindings.tables[id];
      fn.addEnvironment(definitionOf.envVar, table.tableName);
      const actions = uses.tables?.[id];
      // Exactly the row's actions, on the table and its indexes (a Query of a GSI needs the index's ARN).
      if (actions && actions.length > 0) table.grant(fn, ...actions.map((a) => `dynamodb:${a}`));
    }
    for (const [id, definitionOf] of Object.entries(queues) as [QueueId, (typeof queues)[QueueId]][]) {
      const queue = bindings.queues[id];
      fn.addEnvironment(definitionOf.envVar, queue.queueUrl);
      if (uses.sendsTo?.includes(id)) queue.grantSendMessages(fn);
    }
    for (const [id, access] of Object.entries(uses.buckets ?? {}) as [BucketId, string][]) {
      const bucket = bindings.buckets[id];
      if (!bucket)
        throw new Error(
          `${entryOf(name)} uses bucket "${id}", which ${Stack.of(this).stackName} cannot bind`,
        );
      fn.addEnvironment(buckets[id].envVar, bucket.bucketName);
      if (access === 'read' || access === 'readWrite') bucket.grantRead(fn);
      if (access === 'write' || access === 'readWrite') bucket.grantPut(fn, uses.bucketObjects?.[id] ?? '*');
    }
    if (uses.providerSecrets) for (const secret of bindings.providerSecrets) secret.grantRead(fn);
    if (uses.publicApi) {
      if (!bindings.publicBaseUrl)
        throw new Error(
          `${entryOf(name)} calls the public API, which ${Stack.of(this).stackName} cannot bind`,
        );
      // A plain URL, not a grant: the probe calls the API as any client does.
      fn.addEnvironment(PROBE_BASE_URL_ENV, bindings.publicBaseUrl);
    }
  }

  /** An unhandled error or a throttle is never routine: alarm on the first one in five minutes. */
  private alarms(functionName: string, topic: ITopic): void {
    const action = new SnsAction(topic);
    const metrics = {
      errors: this.function.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
      throttles: this.function.metricThrottles({ period: Duration.minutes(5), statistic: 'Sum' }),
    };
    for (const [kind, metric] of Object.entries(metrics)) {
      new Alarm(this, `${kind}-alarm`, {
        alarmName: `${functionName}-${kind}`,
        alarmDescription: `${functionName}: ${kind} in the last 5 minutes`,
        metric,
        threshold: 1,
        evaluationPeriods: 1,
        comparisonOperator: ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treatMissingData: TreatMissingData.NOT_BREACHING,
      }).addAlarmAction(action);
    }
  }
}
