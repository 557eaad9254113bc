/**
 * Stage configuration of the CDK app, read from CDK context (`cdk.json` or `-c key=value`) and validated at
 * synth time, so a typo fails `cdk synth` with the key's name instead of a cold start on AWS.
 * Plain data and parsing only: importable without `aws-cdk-lib`. Every key is documented in the README
 * ("Deploy to AWS").
 */
import {
  DEFAULT_STREAM_KEEP_ALIVE_MS,
  LOG_LEVELS,
  type LogLevel,
  loadConfig,
  TUNABLE_ENV,
} from '#functions/config.ts';
import { type FunctionDefinition, functions, timeoutOf } from './functions.ts';
import { queues, tables } from './resources.ts';

/** Schedules a scheduled function can name (`schedule('…')` in lib/functions.ts). */
export type ScheduleId = 'holdSweeper' | 'usageReport' | 'priceSync' | 'uptimeProbe';

export interface StageConfig {
  /** Lowercase stage name; physical names are prefixed `svc-<stage>-`. */
  readonly stage: string;
  /** Production stages keep data on stack deletion, refuse table deletion and keep logs longer. */
  readonly production: boolean;
  /** `svc-<stage>`, the prefix of every physical name. */
  readonly prefix: string;
  /** `PRICE_MIN_MARGIN` of every function; absent: the functions' built-in default. */
  readonly priceMinMargin: number | undefined;
  /** `LOG_LEVEL` of every function. */
  readonly logLevel: string;
  /** CloudWatch Logs retention of every function's log group, in days. */
  readonly logRetentionDays: number;
  /** EventBridge Scheduler expressions (`rate(…)` or `cron(…)`, UTC). */
  readonly schedules: Readonly<Record<ScheduleId, string>>;
  /**
   * Names of the Secrets Manager secrets holding upstream keys, exactly as the registry's deployments reference
   * them (`secretsmanager:<name>`). The data stack creates them; functions that call providers may read them.
   */
  readonly providerSecrets: readonly string[];
  /**
   * Address subscribed to the alarm topic, if any. Required in production (`none` when the topic is subscribed
   * outside the stack): a deploy without it would delete the subscription.
   */
  readonly alarmEmail: string | undefined;
  /**
   * How long CloudFront waits for the API's first byte and between bytes. Above 60 s needs a CloudFront quota
   * increase; long non-streamed completions can use the API or Function URLs directly instead.
   */
  readonly cdnReadTimeoutSeconds: number;
  /** Tuning variables given to every function (`functionEnv` context; names in TUNABLE_ENV). */
  readonly functionEnv: Readonly<Record<string, string>>;
  /**
   * Concurrency reserved for the settlement consumer (`settlementReservedConcurrency`; 0 for none). Unreserved, a
   * surge of long streams can take the region's whole pool and throttle it: throttled batches count as receives,
   * and after five go to the DLQ, charges not debited. Default: SETTLEMENT_MAX_CONCURRENCY in production, none
   * elsewhere (a new account's quota may not spare it: Lambda keeps 100 unreserved).
   */
  readonly settlementReservedConcurrency: number;
}

/**
 * `-c functionEnv='{"HOLD_TTL_MS":"2400000"}'` or an object in cdk.json. Names outside TUNABLE_ENV are refused,
 * and values are checked by the functions' own config parser, so a bad one fails the synth, naming it.
 */
const functionEnv = (context: Context, key: string): Readonly<Record<string, string>> => {
  const raw = context(key);
  if (raw === undefined || raw === null || raw === '') return {};
  let value: unknown = raw;
  if (typeof raw === 'string') {
    try {
      value = JSON.parse(raw);
    } catch {
      return fail(key, 'a JSON object of variable names to values', raw);
    }
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return fail(key, 'a JSON object of variable names to values', raw);
  const env: Record<string, string> = {};
  for (const [name, v] of Object.entries(value)) {
    if (!TUNABLE_ENV.includes(name)) fail(key, `names among ${TUNABLE_ENV.join(', ')}`, name);
    if (typeof v !== 'string' && typeof v !== 'number') fail(key, `a string or number for ${name}`, v);
    env[name] = String(v);
  }
  let holdTtlMs = 0;
  try {
    holdTtlMs = loadConfig({ ...CONFIG_PLACEHOLDERS, ...env }).holdTtlMs;
  } catch (error) {
    fail(key, 'valid values', (error as Error).message);
  }
  const problem = holdTtlProblem(holdTtlMs);
  if (problem) fail(key, `HOLD_TTL_MS of ${problem}`, holdTtlMs);
  return env;
};

/**
 * What a hold TTL must be when it is too short (`at least …`, with why), or null. A hold must outlive the longest call it covers, and that call's
 * settlement: released earlier, the sweeper frees money a running call is still drawing on, and the call's cost
 * lands as debt. The same functions and timeouts run on AWS and under `npm start`, so both check this.
 */
export const holdTtlProblem = (holdTtlMs: number): string | null => {
  const longestCallS = Math.max(
    ...Object.values(functions as Readonly<Record<string, FunctionDefinition>>)
      .filter((d) => d.trigger.kind === 'http')
      .map(timeoutOf),
  );
  const settleS = settlementAllowanceS();
  const minimumMs = (longestCallS + settleS) * 1000;
  return holdTtlMs < minimumMs
    ? `at least ${minimumMs} (the longest HTTP function timeout, ${longestCallS} s, plus ${settleS} s for its settlement's every delivery)`
    : null;
};

/**
 * Time a hold is kept beyond its call's longest run for its settlement: every delivery the queue makes of it, each
 * a visibility timeout apart, before the last goes to the DLQ. Less, and a settlement that failed twice or three
 * times found its hold swept, its cost landing as debt rather than against what it held.
 */
const settlementAllowanceS = (): number => {
  const { visibilityTimeoutSeconds, deadLetter } = queues.settlement;
  return visibilityTimeoutSeconds * deadLetter.maxReceiveCount;
};

/** Most concurrent invocations of a queue consumer (the settlement consumer): see its event source (jobs-stack). */
export const SETTLEMENT_MAX_CONCURRENCY = 50;

/** Stand-ins for the names the stacks set, so loadConfig can check the tunable values on their own. */
export const CONFIG_PLACEHOLDERS: Readonly<Record<string, string>> = Object.fromEntries([
  ...Object.values(tables).map((t) => [t.envVar, 'placeholder']),
  [queues.settlement.envVar, 'placeholder'],
]);

export const DEFAULT_SCHEDULES: Readonly<Record<ScheduleId, string>> = {
  holdSweeper: 'rate(5 minutes)',
  usageReport: 'rate(5 minutes)',
  priceSync: 'rate(1 hour)',
  // The incident rule judges minutes: one round a minute is the finest it can use.
  uptimeProbe: 'rate(1 minute)',
};

/** The context key of each schedule, e.g. `-c holdSweeperSchedule="rate(10 minutes)"`. */
export const scheduleContextKey = (id: ScheduleId): string => `${id}Schedule`;

const RATE = /^rate\((\d+) (minute|hour|day)s?\)$/;
const CRON = /^cron\([^()]+\)$/;
const RATE_UNIT_MINUTES = { minute: 1, hour: 60, day: 1_440 } as const;

/** The minutes between runs of a `rate(…)` schedule; null for a `cron(…)`, whose runs have no one interval. */
export const rateMinutes = (expression: string): number | null => {
  const rate = RATE.exec(expression);
  return rate ? Number(rate[1]) * RATE_UNIT_MINUTES[rate[2] as keyof typeof RATE_UNIT_MINUTES] : null;
};

/** The retention periods CloudWatch Logs accepts. */
const RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
];
type Context = (key: string) => unknown;

const fail = (key: string, expected: string, got: unknown): never => {
  throw new Error(`CDK context "${key}" must be ${expected}, got ${JSON.stringify(got)}`);
};

const text = (context: Context, key: string): string | undefined => {
  const value = context(key);
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean')
    return fail(key, 'a string', value);
  return String(value);
};

const number = (context: Context, key: string, valid: (n: number) => boolean, expected: string) => {
  const raw = text(context, key);
  if (raw === undefined) return undefined;
  const value = Number(raw);
  return Number.isFinite(value) && valid(value) ? value : fail(key, expected, context(key));
};

/** `-c providerSecrets=svc/openai/key-1,svc/groq/key-1` on the command line, or a JSON array in cdk.json. */
const secretNames = (context: Context, key: string): readonly string[] => {
  const value = context(key);
  if (value === undefined || value === null || value === '') return [];
  const list = Array.isArray(value) ? value : typeof value === 'string' ? value.split(',') : null;
  if (list === null) return fail(key, 'a list of secret names', value);
  const cleaned = list.map((name) => (typeof name === 'string' ? name.trim() : name));
  for (const name of cleaned) {
    // Secrets Manager's own rule for names.
    if (typeof name !== 'string' || !/^[A-Za-z0-9/_+=.@-]{1,512}$/.test(name))
      fail(key, 'secret names of letters, digits and /_+=.@-', value);
  }
  return [...new Set(cleaned as string[])];
};

/** Reads and validates the stage configuration; `context` is `app.node.tryGetContext`. */
export const stageConfig = (context: Context): StageConfig => {
  const stage = text(context, 'stage') ?? 'dev';
  if (!/^[a-z][a-z0-9-]{0,15}$/.test(stage))
    fail('stage', 'lowercase letters, digits, - (at most 16)', stage);
  const explicit = text(context, 'production');
  if (explicit !== undefined && explicit !== 'true' && explicit !== 'false')
    fail('production', 'true or false', context('production'));
  const production =
    explicit === undefined ? stage === 'prod' || stage === 'production' : explicit === 'true';

  const logLevel = text(context, 'logLevel') ?? 'info';
  // The stage's alarms count log lines (lib/functions.ts, logAlarms): a refused price sync and a failed uptime round
  // are warnings, a settlement record logged instead of sent an error. A level above warn would silence them.
  const alarmed = LOG_LEVELS.slice(0, LOG_LEVELS.indexOf('warn') + 1);
  if (!alarmed.includes(logLevel as LogLevel))
    fail('logLevel', `one of ${alarmed.join(', ')} (the alarms count warn and error lines)`, logLevel);

  const schedules = { ...DEFAULT_SCHEDULES };
  for (const id of Object.keys(DEFAULT_SCHEDULES) as ScheduleId[]) {
    const key = scheduleContextKey(id);
    const expression = text(context, key);
    if (expression === undefined) continue;
    if (!RATE.test(expression) && !CRON.test(expression))
      fail(key, 'a schedule expression like "rate(5 minutes)" or "cron(0 * * * ? *)"', expression);
    schedules[id] = expression;
  }

  const alarmContext = text(context, 'alarmEmail');
  if (
    alarmContext !== undefined &&
    alarmContext !== 'none' &&
    !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(alarmContext)
  )
    fail('alarmEmail', 'an email address, or none', alarmContext);
  // The topic's email subscription is the stack's: a production deploy that leaves the address out deletes it, and
  // the money alarms (DLQ, unsent settlements, the queue's age) stop reaching anyone, without an error. So a
  // production stage names one every time, or says `none` — its subscriptions are made outside this stack.
  if (production && alarmContext === undefined)
    fail(
      'alarmEmail',
      'given on every deploy of a production stage (an address, or none when the alarm topic is subscribed outside the stack)',
      undefined,
    );
  const alarmEmail = alarmContext === 'none' ? undefined : alarmContext;

  const cdnReadTimeoutSeconds =
    number(
      context,
      'cdnReadTimeoutSeconds',
      (n) => Number.isInteger(n) && n >= 1 && n <= 180,
      'an integer 1–180',
    ) ?? 60;
  const env = functionEnv(context, 'functionEnv');
  // A stream quiet for the CDN's read timeout is cut there: its keep-alive comments must come sooner.
  const { streamKeepAliveMs } = loadConfig({ ...CONFIG_PLACEHOLDERS, ...env });
  if (streamKeepAliveMs >= cdnReadTimeoutSeconds * 1000)
    fail(
      'functionEnv',
      `STREAM_KEEP_ALIVE_MS (default ${DEFAULT_STREAM_KEEP_ALIVE_MS}) under cdnReadTimeoutSeconds (${cdnReadTimeoutSeconds} s), or CloudFront cuts quiet streams`,
      streamKeepAliveMs,
    );

  return {
    stage,
    production,
    prefix: `svc-${stage}`,
    // Same bounds as functions/config.ts, checked here so a bad value fails the synth, not a cold start.
    priceMinMargin: number(context, 'priceMinMargin', (n) => n >= 0 && n <= 10, 'a number from 0 to 10'),
    logLevel,
    logRetentionDays:
      number(
        context,
        'logRetentionDays',
        (n) => RETENTION_DAYS.includes(n),
        'a CloudWatch retention in days',
      ) ?? (production ? 365 : 30),
    schedules,
    providerSecrets: secretNames(context, 'providerSecrets'),
    alarmEmail,
    cdnReadTimeoutSeconds,
    functionEnv: env,
    settlementReservedConcurrency:
      number(
        context,
        'settlementReservedConcurrency',
        (n) => n === 0 || (Number.isInteger(n) && n >= SETTLEMENT_MAX_CONCURRENCY && n <= 10_000),
        `0, or an integer from ${SETTLEMENT_MAX_CONCURRENCY} (the consumer's maximum concurrency) to 10000`,
      ) ?? (production ? SETTLEMENT_MAX_CONCURRENCY : 0),
  };
};
