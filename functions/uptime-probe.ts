import { randomBytes } from 'node:crypto';
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import middy from '@middy/core';
import { boundedRequests } from '#adapters/aws-clients.ts';
import { DynamoProbeLog } from '#adapters/dynamo-probe-log.ts';
import { createLogger, type Logger } from '#adapters/logger.ts';
import type { Clock } from '#core/ports.ts';
import {
  PROBE_BASE_URL_ENV,
  type ProbeAnswer,
  type ProbeCheck,
  type ProbeFailure,
  type ProbeLog,
  type ProbeRound,
  probeChecks,
  probeIncrement,
  probeKey,
  UPTIME_CHECK_FAILED,
  UPTIME_ROUND_FAILED,
} from '#core/uptime-probe.ts';
import { type Config, loadConfig } from './config.ts';

/**
 * How long a check may take. A cold start of a function through the CDN takes a second or two; a platform that
 * needs ten to answer a preflight is not serving anyone.
 */
export const PROBE_TIMEOUT_MS = 10_000;

/**
 * A failed check is asked once more this long after, and fails only if that fails too. The round's checks leave
 * together, over one DNS lookup and one network path: a blip of the probe's own would fail them all at once.
 */
export const PROBE_RETRY_DELAY_MS = 2_000;

/** Enough of an answer to judge it: a 401's error body, a preflight's empty one. */
const MAX_BODY_CHARS = 4096;

export interface UptimeProbeDeps {
  /** Ends in `/v1`. */
  readonly baseUrl: string;
  readonly probeLog: ProbeLog;
  readonly clock: Clock;
  readonly log: Logger;
  readonly timeoutMs: number;
  readonly retryDelayMs: number;
  readonly randomBytes: (n: number) => Uint8Array;
  readonly fetch: typeof fetch;
}

/** A schedule's tick, or an operator's invocation: either way the round measures now. */
export type UptimeProbeEvent = Readonly<Record<string, unknown>>;

export interface UptimeProbeSummary {
  readonly at: string;
  readonly checks: number;
  readonly failed: number;
  readonly failures: readonly ProbeFailure[];
}

/** Why a request got no answer, in fixed words: an error's message can carry the URL and more. */
const noAnswer = (error: unknown, timeoutMs: number): string => {
  const name = (error as { name?: unknown })?.name;
  if (name === 'TimeoutError' || name === 'AbortError') return `no answer within ${timeoutMs} ms`;
  const code = (error as { cause?: { code?: unknown } })?.cause?.code;
  return typeof code === 'string' && /^[A-Z_]+$/.test(code) ? `no answer (${code})` : 'no answer';
};

/** What one request of a check found wrong, or null when it got the answer it should. */
type Verdict = { readonly reason: string; readonly storeUnreachable: boolean } | null;

const ask = async (deps: UptimeProbeDeps, c: ProbeCheck): Promise<Verdict> => {
  let answer: ProbeAnswer;
  try {
    const response = await deps.fetch(`${deps.baseUrl}${c.path}`, {
      method: c.method,
      headers: c.headers(),
      redirect: 'manual',
      // Per attempt, and it bounds reading the body too.
      signal: AbortSignal.timeout(deps.timeoutMs),
    });
    const headers: Record<string, string> = {};
    response.headers.forEach((value, name) => {
      headers[name] = value;
    });
    answer = { status: response.status, headers, body: (await response.text()).slice(0, MAX_BODY_CHARS) };
  } catch (error) {
    return { reason: noAnswer(error, deps.timeoutMs), storeUnreachable: false };
  }
  const reason = c.expect(answer);
  return reason === null ? null : { reason, storeUnreachable: c.storeUnreachable?.(answer) ?? false };
};

/** A check, asked again once after a failure; the second answer is the one reported. */
const check = async (deps: UptimeProbeDeps, c: ProbeCheck, index: number): Promise<ProbeFailure | null> => {
  if ((await ask(deps, c)) === null) return null;
  await new Promise((resolve) => setTimeout(resolve, deps.retryDelayMs));
  const verdict = await ask(deps, c);
  if (verdict === null) return null;
  return {
    index,
    check: c.name,
    reason: verdict.reason,
    ...(verdict.storeUnreachable ? { storeUnreachable: true } : {}),
  };
};

/** One round: every check at once, judged. */
export const probeRound = async (deps: UptimeProbeDeps, at: number): Promise<ProbeRound> => {
  const checks = probeChecks(() => probeKey(deps.randomBytes));
  const results = await Promise.all(checks.map((c, i) => check(deps, c, i)));
  return { at, checks: checks.length, failures: results.filter((r) => r !== null) };
};

/**
 * Scheduled every minute (ADR 0008): asks the public API what every call begins with and files the checks that got
 * no proper answer in the minute the round began, where the usage report's incident rule follows each check across
 * rounds. The round is dated by the clock, not the tick: a tick delivered late (Lambda retries a throttled
 * invocation for hours) measures now, not the minute it was meant for. A failure to file it fails the invocation
 * (the function's error alarm), after logging what was found.
 */
export const createHandler = (deps: () => UptimeProbeDeps) =>
  middy<UptimeProbeEvent, UptimeProbeSummary>().handler(async () => {
    const d = deps();
    const round = await probeRound(d, d.clock.now());
    for (const { check, reason } of round.failures) d.log.warn(UPTIME_CHECK_FAILED, { check, reason });
    // One line per failed round, which the alarm counts: rounds, as the incident rule does, not checks (one round
    // of five failed checks is one blip, not five).
    if (round.failures.length > 0)
      d.log.warn(UPTIME_ROUND_FAILED, { failed: round.failures.length, checks: round.checks });
    const increment = probeIncrement(round);
    if (increment) await d.probeLog.recordFailures(increment);
    return {
      at: new Date(round.at).toISOString(),
      checks: round.checks,
      failed: round.failures.length,
      failures: round.failures,
    };
  });

export interface UptimeProbeDepsOptions {
  /** Explicit DynamoDB client settings (the local host's emulator); Lambda uses the defaults. */
  readonly dynamodb?: DynamoDBClientConfig;
  /** Local host only: instruments the DynamoDB client (its stand-in for the function's IAM grants). */
  readonly onDynamoClient?: (client: DynamoDBClient) => void;
  readonly timeoutMs?: number;
  readonly retryDelayMs?: number;
  /** Tests: the clock that dates a round. */
  readonly clock?: Clock;
}

/** The base URL an operator can trust: http(s), no query or fragment, ending in `/v1` (trailing slash dropped). */
export const parseProbeBaseUrl = (value: string | undefined): string => {
  if (!value) throw new Error(`Missing required environment variable ${PROBE_BASE_URL_ENV}`);
  const trimmed = value.trim().replace(/\/+$/, '');
  let url: URL;
  try {
    url = new URL(trimmed);
  } catch {
    throw new Error(`${PROBE_BASE_URL_ENV} must be an http(s) URL ending in /v1, got "${value}"`);
  }
  if (!/^https?:$/.test(url.protocol) || url.search || url.hash || !url.pathname.endsWith('/v1'))
    throw new Error(`${PROBE_BASE_URL_ENV} must be an http(s) URL ending in /v1, got "${value}"`);
  return trimmed;
};

/** The function's dependencies, from its configuration; `close` releases the client. */
export const createUptimeProbeDeps = (
  config: Config,
  baseUrl: string,
  options: UptimeProbeDepsOptions = {},
): UptimeProbeDeps & { close(): void } => {
  const dynamo = new DynamoDBClient({ maxAttempts: 3, ...boundedRequests(), ...options.dynamodb });
  options.onDynamoClient?.(dynamo);
  return {
    baseUrl: parseProbeBaseUrl(baseUrl),
    probeLog: new DynamoProbeLog(dynamo, config.tables.usage),
    clock: options.clock ?? { now: () => Date.now() },
    log: createLogger(config.logLevel, { function: 'uptime-probe' }),
    timeoutMs: options.timeoutMs ?? PROBE_TIMEOUT_MS,
    retryDelayMs: options.retryDelayMs ?? PROBE_RETRY_DELAY_MS,
    randomBytes: (n) => randomBytes(n),
    fetch: (input, init) => fetch(input, init),
    close: () => dynamo.destroy(),
  };
};

let fromEnv: UptimeProbeDeps | undefined;

export const handler = createHandler(() => {
  fromEnv ??= createUptimeProbeDeps(loadConfig(process.env), process.env[PROBE_BASE_URL_ENV] ?? '');
  return fromEnv;
});
