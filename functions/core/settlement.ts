import type { SettlementPlan } from './accounting.ts';
import { ApiError, DeadlineError, ServiceUnavailableError, type UnavailableReason } from './errors.ts';
import { type Attempt, type FailureKind, UpstreamFailure } from './fallback.ts';
import { isCharged, tokensOf, type Usage } from './usage.ts';
import { aggregatesFor, endedAt, faultFor } from './usage-aggregates.ts';

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
  /** How it failed: an upstream failure kind, a 503's reason, `internal`, or `client` (the caller's error). */
  readonly kind: FailureKind | UnavailableReason | 'deadline' | 'internal' | 'client';
  readonly status: number | null;
  /**
   * Operator-facing text (the error's message): never keys or message content, but it may name what the caller
   * sent wrong (a model id, a parameter). It stays internal; the public report words faults itself (ADR 0008).
   */
  readonly detail: string;
}

/** A wallet hold taken at admission, released (and replaced by the actual debit) at settlement. */
export interface HoldRef {
  readonly id: string;
  /** Nano-USD. */
  readonly amount: number;
}

/** What admission took, so settlement can release it and correct the estimate. */
export interface AdmissionRef {
  readonly hold: HoldRef | null;
  /** Tokens charged to the token buckets at admission (estimate). */
  readonly estimatedTokens: number;
  /** µs of TAT per token in the account's TPM and TPD buckets at admission. */
  readonly tokenEmissionUs: { readonly tpm: number; readonly tpd: number };
  /**
   * The TPM and TPD buckets' TATs (epoch µs) just after admission, as admission knew them: how far ahead the call's
   * own charge reached, which bounds what a refund may give back. Absent in records from before 2026-11-28.
   */
  readonly tokenTatUs?: { readonly tpm: number; readonly tpd: number };
  /** The generation of the account's limits the call was admitted under (absent before 2026-11-28). */
  readonly limitsGen?: number;
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
  /** Null when the call never reached admission (refused before, or metering off locally). */
  readonly admission: AdmissionRef | null;
  readonly fault: Fault | null;
  readonly attempts: readonly Attempt[];
  readonly timings: {
    /** Epoch ms the request arrived. */
    readonly receivedAt: number;
    /** Time to the first response byte (headers), ms. */
    readonly firstByteMs: number | null;
    readonly totalMs: number;
    /** Admission's store round trip, ms. */
    readonly admissionMs?: number | null;
    /** First upstream attempt to the serving deployment's first byte, ms. */
    readonly upstreamMs?: number | null;
  };
}

/**
 * A fault's detail is an error's message, which can echo what the caller sent: bounded, so that no request can
 * make its settlement record too large for the queue (the record is its call's only trace).
 */
const boundedDetail = (detail: string): string =>
  detail.length <= MAX_DETAIL ? detail : `${detail.slice(0, MAX_DETAIL)}…`;
const MAX_DETAIL = 1_000;

/** Outcome and fault for a request that ended in an error response. */
export const classifyError = (error: unknown): { outcome: Outcome; status: number; fault: Fault } => {
  if (!(error instanceof ApiError)) {
    return {
      outcome: 'internal_error',
      status: 500,
      fault: { kind: 'internal', status: 500, detail: boundedDetail(describe(error)) },
    };
  }
  const outcome = outcomeForStatus(error);
  const kind =
    error instanceof ServiceUnavailableError
      ? error.reason
      : error instanceof DeadlineError
        ? 'deadline'
        : error.status >= 500 || error.code === 'engine_overloaded'
          ? upstreamKind(error)
          : 'client';
  return {
    outcome,
    status: error.status,
    fault: { kind, status: error.status, detail: detailOf(error) },
  };
};

/**
 * A refusal relayed from the upstream carries the upstream's text, which can echo what the caller sent (a
 * validation error quoting the input): the record names the refusal instead — its status, code and field.
 */
const detailOf = (error: ApiError): string => {
  const cause = error.cause;
  if (cause instanceof UpstreamFailure && cause.upstreamError)
    return `${cause.message}, relayed to the client${error.param ? ` (param ${error.param})` : ''}`;
  return boundedDetail(error.message);
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

/** Tokens the call actually consumed, as the limits count them (failed calls consumed none). */
const tokensConsumed = (record: SettlementRecord): number =>
  isCharged(record.outcome) && record.usage ? tokensOf(record.usage) : 0;

/**
 * What settlement does to the account's token buckets at `nowMs`: the µs of TAT the estimate fell short of
 * (charged now), or charged beyond the tokens consumed (refunded — as far as the call's charge is still ahead in
 * its bucket), at the emission intervals of admission and for the generation of limits it was admitted under
 * (the store applies it to no other). Null when nothing.
 *
 * The bound on refunds: a bucket forgets a charge as it drains, and once drained, later calls' charges start
 * afresh; a refund reaching back past what is still ahead would take theirs. A client could double its minute —
 * a long call with a large cap, the minute's budget spent once that call's charge had drained, then the call
 * aborted and nearly all of its estimate refunded on top of the new calls.
 */
export const tokenCorrectionOf = (
  record: SettlementRecord,
  nowMs: number,
): SettlementPlan['tokenCorrection'] => {
  const admission = record.admission;
  if (!admission || !record.accountId) return null;
  const delta = tokensConsumed(record) - admission.estimatedTokens;
  if (delta === 0) return null;
  const nowUs = Math.floor(nowMs * 1000);
  const correction = (dimension: 'tpm' | 'tpd'): number => {
    const us = delta * admission.tokenEmissionUs[dimension];
    const tat = admission.tokenTatUs?.[dimension];
    if (us >= 0 || tat === undefined) return us;
    return Math.max(us, Math.min(0, nowUs - tat));
  };
  const tpmUs = correction('tpm');
  const tpdUs = correction('tpd');
  if (tpmUs === 0 && tpdUs === 0) return null;
  return { tpmUs, tpdUs, limitsGen: admission.limitsGen ?? null };
};

/**
 * The writes that settle one record: release the hold, debit the cost, correct the token buckets by what the
 * estimate got wrong, count the call in the usage aggregates, and log a fault if there was one.
 */
/**
 * `nowMs`: when the plan is applied, which bounds the token refund (tokenCorrectionOf). By default the call's end,
 * for tests; whatever applies a plan — the consumer, the admin CLI's replay — passes its clock.
 */
export const planSettlement = (record: SettlementRecord, nowMs: number = endedAt(record)): SettlementPlan => {
  const admission = record.admission;
  const tokenCorrection = tokenCorrectionOf(record, nowMs);
  return {
    settlementId: record.id,
    accountId: record.accountId,
    requestId: record.requestId,
    receivedAt: record.timings.receivedAt,
    hold: admission?.hold ?? null,
    cost: record.accountId ? record.cost : 0,
    tokenCorrection,
    ledger: { model: record.model, endpoint: record.endpoint, usage: record.usage },
    aggregates: aggregatesFor(record),
    fault: faultFor(record),
  };
};
