import { DEFAULT_HEALTH_POLICY, type HealthPolicy } from '#core/health.ts';
import { DEFAULT_PRICE_MIN_MARGIN } from '#core/price-floor.ts';
import { buckets, queues, type TableId, tables } from '#lib/resources.ts';

/**
 * Function configuration, read once per cold start from the environment and typed. A missing or
 * malformed variable fails the cold start with the variable's name, instead of failing requests later.
 * AWS region, credentials and endpoints are not here: the SDK reads the standard `AWS_*` variables itself
 * (the local host passes emulator endpoints explicitly, see container.ts).
 */
export interface Config {
  readonly tables: Readonly<Record<TableId, string>>;
  readonly settlementQueueUrl: string;
  /** Trust a key lookup (hit or miss) this long; bounds how late a revocation takes effect. */
  readonly keyCacheTtlMs: number;
  /** Trust an account profile (tier, quota) this long; bounds how late a tier change takes effect. */
  readonly accountCacheTtlMs: number;
  /** After this long an unsettled wallet hold may be released by the sweeper. */
  readonly holdTtlMs: number;
  /** Age after which the registry snapshot is refreshed in the background. */
  readonly registryRefreshMs: number;
  /** Documented request body limit for JSON endpoints; larger bodies get 413. */
  readonly maxJsonBodyBytes: number;
  /** Documented limit of a transcription upload (the whole multipart body); larger ones get 413. */
  readonly maxAudioBodyBytes: number;
  readonly upstream: UpstreamConfig;
  /** How long an event stream may send the client nothing before it sends an SSE comment (chat-stream.ts). */
  readonly streamKeepAliveMs: number;
  /** How long a settlement record may wait to share an SQS batch (see SqsSettlementSink). */
  readonly settlementLingerMs: number;
  /** Settlements of one SQS batch written at once; they contend only when they share an account. */
  readonly settlementParallelism: number;
  readonly logLevel: LogLevel;
  /** The site bucket (status page, `usage.json`); only the usage-report function is given one. */
  readonly siteBucket: string | null;
  /** Circuit breaker and rolling-window settings of deployment health (ADR 0006). */
  readonly health: HealthPolicy;
  /** Minimum margin over upstream cost that published prices never fall below (0.2 = 20 %). */
  readonly priceMinMargin: number;
  /**
   * How long the CDN in front of the API waits for a response's first byte (its origin read timeout), ms; 0: no
   * CDN. Set by the stacks from `cdnReadTimeoutSeconds`. A call that came through the CDN must begin its response
   * within it: past it the CDN has answered 504 and left, and whatever the call still did would be billed unseen.
   */
  readonly cdnReadTimeoutMs: number;
  /**
   * How long the REST API lets a streamed integration stay silent (5 minutes on a regional endpoint), ms; 0: no
   * REST API. Set by the stacks. A non-stream call sends nothing until it is done, so through the REST API it must
   * begin its response within this, for the same reason as the CDN's.
   */
  readonly restApiIdleTimeoutMs: number;
}

export interface UpstreamConfig {
  /** Non-stream calls: time allowed for the whole upstream response to start (headers). */
  readonly completionTimeoutMs: number;
  /** Streams: time allowed until the first event, the point where we commit to a deployment. */
  readonly streamFirstByteTimeoutMs: number;
  /** Streams: longest silence between events once streaming. */
  readonly idleTimeoutMs: number;
  readonly maxAttempts: number;
  /** Keep-alive connections per upstream origin. */
  readonly connectionsPerOrigin: number;
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

/**
 * The settings an operator may tune (README, "Configuration"): per stage through the CDK `functionEnv` context
 * key, and from the shell for `npm start`. Resource names come from the stacks; LOG_LEVEL and PRICE_MIN_MARGIN
 * have CDK context keys of their own.
 */
export const TUNABLE_ENV: readonly string[] = [
  'KEY_CACHE_TTL_MS',
  'ACCOUNT_CACHE_TTL_MS',
  'HOLD_TTL_MS',
  'REGISTRY_REFRESH_MS',
  'MAX_JSON_BODY_BYTES',
  'MAX_AUDIO_BODY_BYTES',
  'UPSTREAM_STREAM_FIRST_BYTE_TIMEOUT_MS',
  'UPSTREAM_COMPLETION_TIMEOUT_MS',
  'UPSTREAM_IDLE_TIMEOUT_MS',
  'UPSTREAM_MAX_ATTEMPTS',
  'UPSTREAM_CONNECTIONS_PER_ORIGIN',
  'STREAM_KEEP_ALIVE_MS',
  'SETTLEMENT_LINGER_MS',
  'SETTLEMENT_PARALLELISM',
  'HEALTH_WINDOW_MS',
  'HEALTH_MIN_CALLS',
  'HEALTH_FAILURE_RATE',
  'HEALTH_OVERLOAD_RUN',
  'HEALTH_FAILURE_RUN',
  'CIRCUIT_COOLDOWN_MS',
  'CIRCUIT_MAX_COOLDOWN_MS',
];

/**
 * How long a stream may go without sending the client anything before it sends an SSE comment. What is in front of
 * the function cuts a response silent for longer than its read timeout — CloudFront's 60 s (between packets, not
 * only before the first), the REST API's idle timeout — and a model reasoning before it writes (hidden reasoning,
 * Anthropic's thinking, an upstream's own keep-alives, which are not relayed) can be silent for minutes.
 * Clients and SDKs ignore comments.
 */
export const DEFAULT_STREAM_KEEP_ALIVE_MS = 15_000;

type Env = Readonly<Record<string, string | undefined>>;

const required = (env: Env, name: string): string => {
  const value = env[name];
  if (value === undefined || value.trim() === '')
    throw new Error(`Missing required environment variable ${name}`);
  return value;
};

/**
 * The longest delay a timer takes: Node fires a `setTimeout` of 2³¹ ms or more after 1 ms (with a warning), so a
 * timeout set that long would cut every call at once rather than never.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The longest a key or account lookup may be trusted. It bounds how late a revocation (or a tier change) takes
 * effect: a cache trusted for days would keep a revoked, leaked key working for days.
 */
export const MAX_CACHE_TTL_MS = 5 * 60_000;

/** Lambda's limit on an invocation's request payload: no body above it reaches a function at all. */
export const LAMBDA_PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024;

/**
 * The largest JSON body limit: the event Lambda is handed carries the body as a JSON string, escaped (a `"` in
 * the body takes two bytes there, a control character six), with headers and request context around it, and the
 * whole must fit the 6 MB payload. The default leaves that room for ordinary text; more would not.
 */
export const MAX_JSON_BODY_LIMIT_BYTES = 4 * 1024 * 1024;

/**
 * The largest transcription upload that fits Lambda's payload once a Function URL has base64-encoded it (4/3 of
 * its size), with room for the event's other fields.
 */
export const MAX_AUDIO_BODY_LIMIT_BYTES = 4_400_000;

/** Upstream calls one request may make: more turns a misconfiguration into a fan-out per request. */
export const MAX_UPSTREAM_ATTEMPTS = 20;

const integer = (env: Env, name: string, fallback: number, min = 0, ceiling?: number): number => {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  // Durations are timers' delays (and cache ages compared with them): the same ceiling for all.
  const max = ceiling ?? (name.endsWith('_MS') ? MAX_TIMER_MS : Number.MAX_SAFE_INTEGER);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`Environment variable ${name} must be an integer from ${min} to ${max}, got "${raw}"`);
  }
  return value;
};

const fraction = (env: Env, name: string, fallback: number, max = 1): number => {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0 || value > max) {
    throw new Error(`Environment variable ${name} must be a number from 0 to ${max}, got "${raw}"`);
  }
  return value;
};

/** A failure share that opens a circuit: 0 would open one on successes alone. */
const positiveFraction = (env: Env, name: string, fallback: number): number => {
  const value = fraction(env, name, fallback);
  if (value === 0)
    throw new Error(`Environment variable ${name} must be above 0 (0 opens circuits on successes)`);
  return value;
};

export const LOG_LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error', 'silent'];

const logLevel = (env: Env): LogLevel => {
  const raw = env.LOG_LEVEL ?? 'info';
  if (!(LOG_LEVELS as readonly string[]).includes(raw)) {
    throw new Error(`Environment variable LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${raw}"`);
  }
  return raw as LogLevel;
};

/** Body limit for JSON endpoints: 4 MiB, under the 6 MB Lambda request payload limit. */
export const DEFAULT_MAX_JSON_BODY_BYTES = 4 * 1024 * 1024;

/**
 * Upload limit for transcriptions: 4 MiB. A Function URL hands a binary body to Lambda base64-encoded, so
 * 4 MiB becomes ~5.6 MB of the 6 MB invocation payload; it cannot usefully be raised past ~4.4 MB.
 */
export const DEFAULT_MAX_AUDIO_BODY_BYTES = 4 * 1024 * 1024;

export const loadConfig = (env: Env): Config => ({
  tables: {
    accounts: required(env, tables.accounts.envVar),
    buckets: required(env, tables.buckets.envVar),
    wallet: required(env, tables.wallet.envVar),
    registry: required(env, tables.registry.envVar),
    usage: required(env, tables.usage.envVar),
  },
  settlementQueueUrl: required(env, queues.settlement.envVar),
  keyCacheTtlMs: integer(env, 'KEY_CACHE_TTL_MS', 5_000, 0, MAX_CACHE_TTL_MS),
  accountCacheTtlMs: integer(env, 'ACCOUNT_CACHE_TTL_MS', 5_000, 0, MAX_CACHE_TTL_MS),
  holdTtlMs: integer(env, 'HOLD_TTL_MS', 30 * 60_000, 60_000),
  registryRefreshMs: integer(env, 'REGISTRY_REFRESH_MS', 15_000),
  maxJsonBodyBytes: integer(
    env,
    'MAX_JSON_BODY_BYTES',
    DEFAULT_MAX_JSON_BODY_BYTES,
    1024,
    MAX_JSON_BODY_LIMIT_BYTES,
  ),
  maxAudioBodyBytes: integer(
    env,
    'MAX_AUDIO_BODY_BYTES',
    DEFAULT_MAX_AUDIO_BODY_BYTES,
    1024,
    MAX_AUDIO_BODY_LIMIT_BYTES,
  ),
  upstream: {
    completionTimeoutMs: integer(env, 'UPSTREAM_COMPLETION_TIMEOUT_MS', 180_000, 1),
    streamFirstByteTimeoutMs: integer(env, 'UPSTREAM_STREAM_FIRST_BYTE_TIMEOUT_MS', 30_000, 1),
    idleTimeoutMs: integer(env, 'UPSTREAM_IDLE_TIMEOUT_MS', 60_000, 1),
    maxAttempts: integer(env, 'UPSTREAM_MAX_ATTEMPTS', 6, 1, MAX_UPSTREAM_ATTEMPTS),
    connectionsPerOrigin: integer(env, 'UPSTREAM_CONNECTIONS_PER_ORIGIN', 256, 1),
  },
  streamKeepAliveMs: integer(env, 'STREAM_KEEP_ALIVE_MS', DEFAULT_STREAM_KEEP_ALIVE_MS, 1),
  settlementLingerMs: integer(env, 'SETTLEMENT_LINGER_MS', 0),
  settlementParallelism: integer(env, 'SETTLEMENT_PARALLELISM', 4, 1),
  logLevel: logLevel(env),
  siteBucket: env[buckets.site.envVar]?.trim() || null,
  health: {
    windowMs: integer(env, 'HEALTH_WINDOW_MS', DEFAULT_HEALTH_POLICY.windowMs, 1000),
    minCalls: integer(env, 'HEALTH_MIN_CALLS', DEFAULT_HEALTH_POLICY.minCalls, 1),
    failureRate: positiveFraction(env, 'HEALTH_FAILURE_RATE', DEFAULT_HEALTH_POLICY.failureRate),
    overloadRun: integer(env, 'HEALTH_OVERLOAD_RUN', DEFAULT_HEALTH_POLICY.overloadRun, 1),
    failureRun: integer(env, 'HEALTH_FAILURE_RUN', DEFAULT_HEALTH_POLICY.failureRun, 1),
    cooldownMs: integer(env, 'CIRCUIT_COOLDOWN_MS', DEFAULT_HEALTH_POLICY.cooldownMs, 1),
    maxCooldownMs: integer(env, 'CIRCUIT_MAX_COOLDOWN_MS', DEFAULT_HEALTH_POLICY.maxCooldownMs, 1),
  },
  priceMinMargin: fraction(env, 'PRICE_MIN_MARGIN', DEFAULT_PRICE_MIN_MARGIN, 10),
  cdnReadTimeoutMs: integer(env, 'CDN_READ_TIMEOUT_MS', 0),
  restApiIdleTimeoutMs: integer(env, 'REST_API_IDLE_TIMEOUT_MS', 0),
});
