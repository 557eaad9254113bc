import { ApiError } from './errors.ts';
import type { Attempt, FailureKind } from './fallback.ts';
import type { Usage } from './usage.ts';

export type Endpoint = 'chat.completions' | 'embeddings' | 'audio.transcriptions' | 'audio.speech';

/**
 * How a call ended, as billing and the usage report need to tell calls apart.
 * Only `success` and `client_aborted` are charged: the client got (or walked away from) what it asked for.
 */
export type Outcome =
  | 'success'
  | 'client_aborted'
  | 'stream_interrupted'
  | 'client_error'
  | 'unauthenticated'
  | 'rate_limited'
  | 'insufficient_balance'
  | 'overloaded'
  | 'upstream_error'
  | 'unavailable'
  | 'internal_error';

export interface Fault {
  readonly kind: FailureKind | 'internal' | 'client';
  readonly status: number | null;
  /** Operator-facing text; never contains keys or request content. */
  readonly detail: string;
}

/** A wallet hold taken at admission, released (and replaced by the actual debit) at settlement. */
export interface HoldRef {
  readonly id: string;
  /** Nano-USD. */
  readonly amount: number;
}

/**
 * Everything settlement and the usage report need about one call. Sent to the settlement queue after
 * the response has ended; `id` is the idempotency key (a redelivered record must settle once).
 */
export interface SettlementRecord {
  readonly v: 1;
  readonly id: string;
  readonly requestId: string;
  readonly endpoint: Endpoint;
  readonly accountId: string | null;
  readonly keyPrefix: string | null;
  readonly model: string | null;
  readonly deployment: string | null;
  readonly provider: string | null;
  readonly stream: boolean;
  /** HTTP status the client received (a stream interrupted mid-way still began with 200). */
  readonly status: number;
  readonly outcome: Outcome;
  readonly usage: Usage | null;
  /** Published price of the usage, nano-USD; 0 for uncharged outcomes and free models. */
  readonly cost: number;
  readonly hold: HoldRef | null;
  readonly fault: Fault | null;
  readonly attempts: readonly Attempt[];
  readonly timings: {
    /** Epoch ms the request arrived. */
    readonly receivedAt: number;
    /** Time to the first response byte (headers), ms. */
    readonly firstByteMs: number | null;
    readonly totalMs: number;
  };
}

/** Outcome and fault for a request that ended in an error response. */
export const classifyError = (error: unknown): { outcome: Outcome; status: number; fault: Fault } => {
  if (!(error instanceof ApiError)) {
    return {
      outcome: 'internal_error',
      status: 500,
      fault: { kind: 'internal', status: 500, detail: describe(error) },
    };
  }
  const outcome = outcomeForStatus(error);
  const kind = error.status >= 500 || error.code === 'engine_overloaded' ? upstreamKind(error) : 'client';
  return { outcome, status: error.status, fault: { kind, status: error.status, detail: error.message } };
};

const outcomeForStatus = (error: ApiError): Outcome => {
  if (error.code === 'engine_overloaded') return 'overloaded';
  switch (error.status) {
    case 401:
      return 'unauthenticated';
    case 402:
      return 'insufficient_balance';
    case 429:
      return 'rate_limited';
    case 503:
      return 'unavailable';
    default:
      return error.status >= 500 ? 'upstream_error' : 'client_error';
  }
};

const upstreamKind = (error: ApiError): Fault['kind'] => {
  const cause = error.cause;
  if (cause && typeof cause === 'object' && 'kind' in cause && typeof cause.kind === 'string') {
    return cause.kind as FailureKind;
  }
  return error.status === 429 ? 'overloaded' : 'internal';
};

const describe = (error: unknown): string =>
  error instanceof Error ? `${error.name}: ${error.message}` : 'unknown error';
