import {
  ApiError,
  DeadlineError,
  EngineOverloadedError,
  InvalidRequestError,
  retryAfterHeaders,
  UpstreamFaultError,
} from './errors.ts';
import type { Clock, Random } from './ports.ts';
import type { Deployment } from './registry.ts';

/**
 * How an upstream call failed, as far as routing is concerned.
 * - `connect`, `dropped`, `timeout`: the transport failed (refused, reset, no first byte in time).
 * - `overloaded`: busy — 429 or 503 `engine_overloaded`, 529; `rate_limited`: any other 429 (our key's quota).
 * - `server_error`: 5xx; `auth`: 401/403 (our key is bad); `protocol`: unparseable reply.
 * - `rejected`: the upstream refused the request itself (other 4xx); no other deployment will do better.
 * - `unsupported`: this deployment cannot serve the request — its protocol cannot express it (e.g. `n` > 1 on
 *   Anthropic), or it is too long for its window or size limits; another deployment may, so routing moves on. Only
 *   when none can does the client get the 400. (An upstream that does not stream serves a stream from its whole
 *   reply: ADR 0014.)
 */
export type FailureKind =
  | 'connect'
  | 'dropped'
  | 'timeout'
  | 'overloaded'
  | 'rate_limited'
  | 'server_error'
  | 'auth'
  | 'protocol'
  | 'rejected'
  | 'unsupported';

export interface UpstreamErrorBody {
  readonly message: string;
  readonly type: string | null;
  readonly code: string | null;
  readonly param: string | null;
}

/** Thrown by upstream adapters before any byte has reached the client. */
export class UpstreamFailure extends Error {
  override readonly name = 'UpstreamFailure';
  readonly kind: FailureKind;
  readonly status: number | null;
  readonly upstreamError: UpstreamErrorBody | null;
  /** How long a busy upstream asked callers to wait (its Retry-After), in ms; null when it did not say. */
  readonly retryAfterMs: number | null;

  constructor(
    kind: FailureKind,
    message: string,
    options: {
      status?: number;
      upstreamError?: UpstreamErrorBody | null;
      retryAfterMs?: number | null;
      cause?: unknown;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.kind = kind;
    this.status = options.status ?? null;
    this.upstreamError = options.upstreamError ?? null;
    this.retryAfterMs = options.retryAfterMs ?? null;
  }
}

/** Faults the upstream itself reported: worth retrying with another of the deployment's keys. */
const KEY_FAULTS: ReadonlySet<FailureKind> = new Set(['overloaded', 'rate_limited', 'server_error', 'auth']);
/**
 * Faults of the key alone — refused (revoked, out of credit), or its own quota spent — which another key of the same
 * deployment may not share: retried with another key on every call, streams included (nothing has reached the client
 * before the first byte; a stream tries one more key, KEY_ONLY_TRIES), not only where spec §7 asks for cycling
 * (non-stream calls, every key, on any upstream fault).
 */
const KEY_ONLY_FAULTS: ReadonlySet<FailureKind> = new Set(['rate_limited', 'auth']);

/** Keys of one deployment a call that does not cycle keys (a stream) tries on faults of the key alone. */
const KEY_ONLY_TRIES = 2;

/**
 * What this instance remembers of keys that failed on their own (KEY_ONLY_FAULTS): a call starts on a key not
 * shunned, so one revoked key of two costs one failed attempt per instance for a while, not every other call's.
 */
export interface KeyMemory {
  shunned(deploymentId: string, keyIndex: number): boolean;
  failed(deploymentId: string, keyIndex: number, failure: UpstreamFailure): void;
}
/**
 * Failures that say the upstream is busy (now, or for our key): they carry when to come back (Retry-After), the client
 * sees 429 when every deployment reports one, and health counts them towards a run of overloads.
 */
export const BUSY: ReadonlySet<Attempt['outcome']> = new Set<FailureKind>(['overloaded', 'rate_limited']);

export interface Attempt {
  readonly deployment: string;
  readonly provider: string;
  /** Index of the deployment key used. */
  readonly keyIndex: number;
  /** `cancelled`: abandoned because the call was refused admission meanwhile (RouteCancelled). */
  readonly outcome: 'ok' | FailureKind | 'cancelled';
  readonly status: number | null;
  readonly ms: number;
  readonly detail: string | null;
}

export interface FallbackOptions {
  /** Spec §7: on non-stream calls the deployment's upstream keys are cycled on an upstream fault. */
  readonly cycleKeys: boolean;
  /**
   * Bound on upstream calls per request, so a bad day cannot multiply latency without limit. A deployment
   * that cannot express the request (`unsupported`), or whose key could not be read, made no call and does not
   * count.
   */
  readonly maxAttempts: number;
  readonly clock: Clock;
  /** Picks the key a request starts on, so load spreads over a deployment's keys. */
  readonly random: Random;
  /** Keys to try last, and where key-only faults are told (none: every key is tried in turn from a random one). */
  readonly keys?: KeyMemory;
  /** Receives every attempt as it ends, successful or not (for settlement and health). */
  readonly attempts: Attempt[];
  /**
   * Aborts when the call runs out of time (the invocation's end, less what answering and settling need). The
   * attempt under way is abandoned — `call` must hand this signal to the upstream request — and no other is
   * started: the client gets a 500 it can retry, and the call is settled, instead of an invocation killed
   * mid-attempt with no answer and no settlement. Aborted with a `RouteCancelled` reason, the call was refused
   * admission while its route ran beside it (Gateway.admitAndRoute).
   */
  readonly deadline?: AbortSignal;
}

export interface Served<T> {
  readonly value: T;
  readonly deployment: Deployment;
}

/**
 * Calls deployments in plan order until one succeeds. Only failures before the first byte reaches the
 * client come through here (adapters resolve once a response can be committed), so any retryable failure
 * may move on. When everything fails: all-busy → 429 `engine_overloaded`, otherwise 500.
 */
export const withFallback = async <T>(
  plan: readonly Deployment[],
  options: FallbackOptions,
  call: (deployment: Deployment, keyIndex: number) => Promise<T>,
): Promise<Served<T>> => {
  const { attempts, clock, deadline } = options;
  let upstreamCalls = countUpstreamCalls(attempts);
  let lastFailure: UpstreamFailure | null = null;
  // The soonest any busy deployment may take a call again, for the all-busy 429's Retry-After.
  let soonestMs = Number.POSITIVE_INFINITY;
  for (const [place, deployment] of plan.entries()) {
    const { keys, fresh } = keyOrder(deployment, options);
    // Attempts kept for the deployments after this one, one each: another key here must not spend them.
    const after = plan.length - 1 - place;
    for (let k = 0; k < keys.length; k++) {
      const keyIndex = keys[k] as number;
      if (upstreamCalls >= options.maxAttempts) return exhausted(attempts, lastFailure, soonestMs);
      if (deadline?.aborted) throw outOfTime(deadline);
      const started = clock.now();
      try {
        const value = await call(deployment, keyIndex);
        attempts.push(record(deployment, keyIndex, 'ok', null, clock.now() - started, null));
        return { value, deployment };
      } catch (error) {
        // A refusal of the request itself stays what it is (a 400), deadline or not.
        if (deadline?.aborted && !(error instanceof UpstreamFailure && error.kind === 'rejected')) {
          // Whatever the attempt threw, it was cut by the deadline or by the call's refusal (or failed just as
          // either came): not a verdict on the deployment, whose own timeouts judge its speed.
          const ms = clock.now() - started;
          attempts.push(
            deadline.reason instanceof RouteCancelled
              ? record(deployment, keyIndex, 'cancelled', null, ms, CANCELLED_DETAIL)
              : record(deployment, keyIndex, 'timeout', null, ms, CUT_DETAIL),
          );
          throw outOfTime(deadline);
        }
        if (!(error instanceof UpstreamFailure)) throw error;
        lastFailure = error;
        if (BUSY.has(error.kind)) soonestMs = Math.min(soonestMs, error.retryAfterMs ?? DEFAULT_RETRY_MS);
        if (reachedUpstream({ outcome: error.kind, status: error.status })) upstreamCalls++;
        attempts.push(
          record(deployment, keyIndex, error.kind, error.status, clock.now() - started, error.message),
        );
        if (error.kind === 'rejected') throw rejected(error);
        if (KEY_ONLY_FAULTS.has(error.kind)) options.keys?.failed(deployment.id, keyIndex, error);
        // Transport failures are about the deployment, not the key: go straight to the next one.
        if (options.cycleKeys ? !KEY_FAULTS.has(error.kind) : !KEY_ONLY_FAULTS.has(error.kind)) break;
        // Without spec §7's cycling, one more key at most, and only one not known to fail: keys of one organisation
        // share its quota, and a stream must not spend its attempts on them before the next deployment.
        if (!options.cycleKeys && (k + 1 >= KEY_ONLY_TRIES || k + 1 >= fresh)) break;
        // Cycling a deployment's keys on its own faults (six keys, or three on each of two failing deployments) must
        // not use up the budget before a healthy deployment further down the plan is tried at all. A fault of the key
        // alone is another matter: the next key is the likeliest to serve.
        if (!KEY_ONLY_FAULTS.has(error.kind) && upstreamCalls + after >= options.maxAttempts) break;
      }
    }
  }
  return exhausted(attempts, lastFailure, soonestMs);
};

/**
 * The keys of `deployment` in the order a call tries them: from a random one (load spreads over the keys), those this
 * instance shuns (KeyMemory) last; `fresh` of them are not shunned. A deployment without keys is called once.
 */
const keyOrder = (deployment: Deployment, options: FallbackOptions): { keys: number[]; fresh: number } => {
  const count = Math.max(1, deployment.keyRefs.length);
  const start = Math.floor(options.random() * count);
  const keys: number[] = [];
  const shunned: number[] = [];
  for (let k = 0; k < count; k++) {
    const keyIndex = (start + k) % count;
    if (count > 1 && options.keys?.shunned(deployment.id, keyIndex)) shunned.push(keyIndex);
    else keys.push(keyIndex);
  }
  const fresh = keys.length;
  return { keys: shunned.length > 0 ? keys.concat(shunned) : keys, fresh };
};

/** The detail of an attempt abandoned at the call's deadline (see FallbackOptions.deadline); no failure has it. */
const CUT_DETAIL = "cut at the call's deadline";

const CANCELLED_DETAIL = 'cancelled: the call was refused admission';

/**
 * A served attempt as it ended up: its answer thrown away because the call was refused admission after it
 * (Gateway.admitAndRoute). Like one cancelled while under way, it is no verdict on its deployment.
 */
export const cancelledAttempt = (attempt: Attempt): Attempt => ({
  ...attempt,
  outcome: 'cancelled',
  detail: CANCELLED_DETAIL,
});

/**
 * Whether an attempt was abandoned — at the call's deadline, or because the call was refused admission — rather
 * than failed: health must not count it against its deployment.
 */
export const abandoned = (attempt: Attempt): boolean =>
  attempt.outcome === 'cancelled' || attempt.detail === CUT_DETAIL;

/**
 * Why a route was stopped when its call was refused admission while the route ran beside it: the refusal is what
 * the client gets; the route only has to stop.
 */
export class RouteCancelled extends Error {
  override readonly name = 'RouteCancelled';

  constructor(refusal: unknown) {
    super('the call was refused admission', { cause: refusal });
  }
}

/**
 * The call ran out of time before any upstream answered: a 500 the client may retry, charged nothing. The
 * deadline's reason, when it is an API error, says which limit came (see Gateway.route); a cancelled route
 * stops with its RouteCancelled.
 */
const outOfTime = (deadline: AbortSignal): Error =>
  deadline.reason instanceof ApiError || deadline.reason instanceof RouteCancelled
    ? deadline.reason
    : deadlineError();

/** The deadline error of a call that reached the longest time its function runs. */
export const deadlineError = (message?: string): DeadlineError =>
  new DeadlineError(
    message ?? 'No upstream provider answered within the longest time a call may take. Please retry.',
    new UpstreamFailure('timeout', "the call's deadline came before any upstream answered"),
  );

/**
 * Whether an attempt reached an upstream: all but those a deployment's protocol could not express (`unsupported`
 * without a status; one the upstream answered, a request too large for its quota, did reach it) and those whose key
 * could not be read (`auth` without a status: a refused key has the upstream's 401 or 403). Neither spends the
 * call's budget of upstream calls, nor shows in `x-svc-attempts`.
 */
const reachedUpstream = (attempt: Pick<Attempt, 'outcome' | 'status'>): boolean =>
  !keyUnread(attempt) && !(attempt.outcome === 'unsupported' && attempt.status === null);

/** An attempt whose key could not be read: `auth` without the upstream's status (nothing was sent). */
export const keyUnread = (attempt: Pick<Attempt, 'outcome' | 'status'>): boolean =>
  attempt.outcome === 'auth' && attempt.status === null;

/** Attempts that reached an upstream (bounded by `maxAttempts`). */
export const countUpstreamCalls = (attempts: readonly Attempt[]): number => {
  let calls = 0;
  for (const a of attempts) if (reachedUpstream(a)) calls++;
  return calls;
};

const record = (
  deployment: Deployment,
  keyIndex: number,
  outcome: Attempt['outcome'],
  status: number | null,
  ms: number,
  detail: string | null,
): Attempt => ({
  deployment: deployment.id,
  provider: deployment.provider,
  keyIndex,
  outcome,
  status,
  ms,
  detail,
});

/** What a busy upstream that gave no Retry-After is taken to want: a second, as SDKs' own backoff starts. */
const DEFAULT_RETRY_MS = 1_000;
/**
 * The longest wait an all-busy 429 passes on. A provider's hint can be an hour (a daily quota of our key spent);
 * by then health routing may have moved on, and a client told to stay away that long would not come back.
 */
const MAX_RETRY_MS = 60_000;

/** Retry-After for an all-busy 429: the soonest any busy deployment said it would take calls, within bounds. */
const retryHeaders = (soonestMs: number): Record<string, string> =>
  retryAfterHeaders(
    Math.min(MAX_RETRY_MS, Math.max(1, Number.isFinite(soonestMs) ? soonestMs : DEFAULT_RETRY_MS)),
  );

const exhausted = (attempts: readonly Attempt[], last: UpstreamFailure | null, soonestMs: number): never => {
  const failed = attempts.filter((a) => a.outcome !== 'ok');
  if (last && failed.length > 0 && failed.every((a) => a.outcome === 'unsupported')) throw rejected(last);
  // Deployments that cannot express the request say nothing about load: the rest decide busy or broken.
  const tried = failed.filter((a) => a.outcome !== 'unsupported');
  if (tried.length > 0 && tried.every((a) => BUSY.has(a.outcome))) {
    throw new EngineOverloadedError({ headers: retryHeaders(soonestMs), cause: last });
  }
  throw new UpstreamFaultError(undefined, last);
};

/** The upstream refused the request as invalid: pass its explanation on as a 400. */
const rejected = (failure: UpstreamFailure): InvalidRequestError =>
  new InvalidRequestError(
    failure.upstreamError?.message ?? 'The upstream provider rejected the request.',
    failure.upstreamError?.code ?? 'upstream_rejected',
    {
      param: failure.upstreamError?.param ?? null,
      cause: failure,
    },
  );
