/**
 * The uptime probe (ADR 0008): what it asks the public API each minute, and what counts as an answer. Pure; the
 * scheduled function (functions/uptime-probe.ts) makes the requests and files the failures.
 *
 * Downtime is otherwise measured on settled calls, and a platform that answers nothing settles nothing: a function
 * that fails at cold start, a broken deploy, the CDN or API Gateway in front refusing every call — every minute of
 * that read as up. The probe's requests cost no upstream call and no money, and leave no record of their own:
 * - a CORS preflight of each POST endpoint, which its function answers itself (ADR 0009) once it has built what its
 *   calls need: the path through the CDN and API Gateway to a function that could start;
 * - `GET /v1/models` with a key nobody has (a new one each attempt, past every instance's cache of misses): the key
 *   store read every call begins with. A 401 `invalid_api_key` is the answer; a 503 says the store is unreachable.
 * Models are not listed, settled or metered for a refused key, so none of it shows in the usage counters.
 */

import { KEY_PREFIX } from './api-keys.ts';
import { ENDPOINT_PATHS, MODELS_PATH, underBase } from './endpoints.ts';
import { type AggregateIncrement, minuteSlot } from './usage-aggregates.ts';

/** The API's public base URL, ending in `/v1` (the stacks set the CDN's: what clients and the status page use). */
export const PROBE_BASE_URL_ENV = 'PROBE_BASE_URL';

/** The message of the warn line each failed check logs (functions/uptime-probe.ts). */
export const UPTIME_CHECK_FAILED = 'uptime probe check failed';

/** The message of the one warn line a round with a failed check logs, which the operators' alarm counts. */
export const UPTIME_ROUND_FAILED = 'uptime probe round failed';

/** One request of a probe round. */
export interface ProbeCheck {
  /** Stable name, for logs: `preflight /v1/embeddings`, `key lookup`. */
  readonly name: string;
  readonly method: 'OPTIONS' | 'GET';
  /** Under the API's base URL (which ends in `/v1`), e.g. `/embeddings`. */
  readonly path: string;
  /** Asked for each attempt: the key lookup's key is new every time. */
  readonly headers: () => Readonly<Record<string, string>>;
  /** What the answer must be; anything else (a timeout, a refused connection) fails too. */
  readonly expect: (answer: ProbeAnswer) => string | null;
  /** A wrong answer that every call shares, whatever its endpoint: the key store cannot be reached. */
  readonly storeUnreachable?: (answer: ProbeAnswer) => boolean;
}

/** What came back, as much as the judge reads: the status, headers (lower-case names) and the body's text. */
export interface ProbeAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

export interface ProbeFailure {
  /** The check's place in the round (probeChecks): its bit in the minute's `pf` counter. */
  readonly index: number;
  readonly check: string;
  /** Fixed words and the status: never an answer's body, which the logs would then carry. */
  readonly reason: string;
  /** The answer was the key store's failure (ProbeCheck.storeUnreachable). */
  readonly storeUnreachable?: boolean;
}

/** What a probe round found. */
export interface ProbeRound {
  /** Epoch ms the round began: the minute its failures are filed in. */
  readonly at: number;
  readonly checks: number;
  readonly failures: readonly ProbeFailure[];
}

/** Where a round's failures go: the usage table's minute counters (`pc<MM>`, `pf<MM>`). */
export interface ProbeLog {
  recordFailures(increment: AggregateIncrement): Promise<void>;
}

/** POST endpoints and their functions: each answers its own preflight. */
const POST_PATHS = Object.values(ENDPOINT_PATHS).map(underBase);

/** An origin no browser has: the preflight is answered for any (ADR 0009), this one names where it came from. */
const PROBE_ORIGIN = 'https://uptime-probe.invalid';

const preflight = (path: string): ProbeCheck => ({
  name: `preflight ${path}`,
  method: 'OPTIONS',
  path,
  headers: () => ({
    origin: PROBE_ORIGIN,
    'access-control-request-method': 'POST',
    'access-control-request-headers': 'authorization, content-type',
  }),
  expect: ({ status, headers }) => {
    if (status !== 204) return `answered ${status}, not 204`;
    const methods = (headers['access-control-allow-methods'] ?? '').split(/\s*,\s*/);
    return methods.includes('POST') ? null : 'answered 204 without POST among the allowed methods';
  },
});

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * A well-formed key no account has: `svc_live_uptimeprobe` and 30 random base62 characters (its public prefix in
 * the gateway's logs reads `svc_live_uptimepr`). Random so that no instance's cache of misses answers for the store.
 */
export const probeKey = (randomBytes: (n: number) => Uint8Array): string => {
  const bytes = randomBytes(30);
  let secret = 'uptimeprobe';
  // 62 does not divide 256: the small bias is of no matter for a key that must only be unknown.
  for (const byte of bytes) secret += BASE62[byte % 62];
  return `${KEY_PREFIX}${secret}`;
};

const keyLookup = (newKey: () => string): ProbeCheck => ({
  name: 'key lookup',
  method: 'GET',
  path: underBase(MODELS_PATH),
  // A new key each attempt: a first attempt that timed out may still have taught an instance that its key is unknown.
  headers: () => ({ authorization: `Bearer ${newKey()}` }),
  // The gateway's answer when a key cannot be looked up (fail closed): the store every call reads first.
  storeUnreachable: ({ status }) => status === 503,
  expect: ({ status, body }) => {
    if (status !== 401) return `answered ${status}, not 401`;
    try {
      const code = (JSON.parse(body) as { error?: { code?: unknown } }).error?.code;
      return code === 'invalid_api_key' ? null : 'answered 401 without the invalid_api_key error';
    } catch {
      return 'answered 401 with a body that is not JSON';
    }
  },
});

/**
 * One round's checks: a preflight of every POST endpoint, and one key lookup with keys of its own. Each has its bit
 * in the minute's `pf` counter, and the key store one more after them: at most 30 checks, so a mask stays a
 * positive 32-bit integer.
 */
export const probeChecks = (newKey: () => string): ProbeCheck[] => [
  ...POST_PATHS.map(preflight),
  keyLookup(newKey),
];

/**
 * A round with failed checks as the minute counters the incident rule reads (`minutes#<HH>`): `pc<MM>`, the checks it
 * made, and `pf<MM>`, which failed, bit `i` for check `i`, and bit `pc` when the key store could not be reached — the
 * rule follows each check across rounds, so one endpoint that keeps failing is seen however busy the others are. Null when nothing failed: a round that found the
 * platform answering adds nothing (ADR 0008: checks are not calls).
 */
export const probeIncrement = (round: ProbeRound): AggregateIncrement | null => {
  if (round.failures.length === 0) return null;
  const { day, subject, minute: mm } = minuteSlot(round.at);
  return {
    day,
    subject,
    counters: {
      [`pc${mm}`]: round.checks,
      [`pf${mm}`]: round.failures.reduce(
        (mask, f) => mask + 2 ** f.index,
        round.failures.some((f) => f.storeUnreachable) ? 2 ** round.checks : 0,
      ),
    },
  };
};
