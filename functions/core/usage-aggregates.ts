import { countUpstreamCalls, keyUnread } from './fallback.ts';
import type { Outcome, SettlementRecord } from './settlement.ts';
import { isCharged, tokensOf } from './usage.ts';

/**
 * What each settled call adds to the anonymous usage aggregates the public report reads (spec §2.6). Keys
 * name a UTC day and a model or pseudo-group — never an account or a key.
 */
export interface AggregateIncrement {
  /** UTC day, `YYYY-MM-DD`. */
  readonly day: string;
  /**
   * What is counted:
   * - `model#<id>` (`model#-` for calls without a valid model): requests, successes, faults, tokens, …;
   * - `status#<group>#<status>`: the error funnel's `count`;
   * - `minutes#<HH>`: one UTC hour's per-minute counters, each call in the minute it ended (on that minute's day):
   *   `r<MM>` (calls the platform was asked to serve: successes and faults, not the caller's own errors nor deadline
   *   cuts and unwired models, which say nothing of availability), `e<MM>` (5xx of a model or `platform`), `o<MM>` (429
   *   `engine_overloaded`) and `u<MM>` (503s of the `incident` group) — what incident detection reads (ADR 0008).
   *   The uptime probe's rounds with a failed check are `pc<MM>` (checks made) and `pf<MM>` (which failed, a bit
   *   per check), in an item of their own (core/uptime-probe.ts).
   */
  readonly subject: string;
  readonly counters: Readonly<Record<string, number>>;
}

/** One fault for the report's recent-faults list. `detail` is fixed text built from the record's fields. */
export interface FaultEntry {
  /** When the call failed (its end, not its arrival), epoch ms. */
  readonly at: number;
  readonly day: string;
  readonly requestId: string;
  /** A model id or a pseudo-group: `platform`, `incident`, `agent-error`. */
  readonly group: string;
  readonly status: number;
  readonly detail: string;
}

export const utcDay = (epochMs: number): string => new Date(epochMs).toISOString().slice(0, 10);

/** Outcomes that are the platform's (or an upstream's) failure, as opposed to the caller's. */
const PLATFORM_FAULTS: ReadonlySet<Outcome> = new Set([
  'stream_interrupted',
  'overloaded',
  'upstream_error',
  'unavailable',
  'internal_error',
]);

/**
 * A 503 because the registry read as empty: nothing could be served, whatever the model. Every such call is part of
 * an incident by rule (spec §7, ADR 0008). A model with no eligible deployment (none configured, all drained, every
 * circuit open) is that model's fault, not the platform's; a 503 because the accounting store could not be reached
 * (`accounting`) is an ordinary platform fault.
 */
const isRegistryEmpty = (record: SettlementRecord): boolean =>
  record.outcome === 'unavailable' && record.fault?.kind === 'registry_empty';

/** The error funnel's pseudo-groups (spec §2.6), beside model ids: no model may be named as one. */
export const PSEUDO_GROUPS: ReadonlySet<string> = new Set(['platform', 'incident', 'agent-error']);

/**
 * Where a non-success lands in the error funnel: the caller's mistakes and tier refusals under `agent-error`
 * (counted apart from downtime, spec §7), 503s of an empty registry under `incident`, the accounting store's 503s,
 * internal errors and calls cut at their deadline under `platform`, every other fault under its model.
 */
export const funnelGroup = (record: SettlementRecord): string => {
  if (!PLATFORM_FAULTS.has(record.outcome)) return 'agent-error';
  if (isRegistryEmpty(record)) return 'incident';
  if (record.outcome === 'unavailable' && record.fault?.kind === 'accounting') return 'platform';
  if (record.outcome === 'internal_error' || record.fault?.kind === 'deadline') return 'platform';
  return record.model ?? 'platform';
};

/**
 * Whether a fault bears on the platform's availability, and so enters the minute counters at all (`r`, and `e`, `o`
 * or `u`). Not a call cut at the longest time a call may take — the platform and its upstreams were working; the call
 * outlasted what it may take — nor one to a model with no deployment configured or left undrained: a standing state
 * of that model, shown in its row, which any key holder could otherwise call once a minute to take the platform's
 * uptime down, or call many times a minute to dilute an outage.
 */
const bearsOnAvailability = (record: SettlementRecord): boolean =>
  record.fault?.kind !== 'deadline' && record.fault?.kind !== 'no_eligible_model';

/** A stream that broke after its 200 is a server fault, whatever its status line said. */
const funnelStatus = (record: SettlementRecord): number =>
  record.outcome === 'stream_interrupted' ? 500 : record.status;

const pad2 = (n: number): string => String(n).padStart(2, '0');

/**
 * Where the minute of `epochMs` is counted: its UTC day, its hour's `minutes#<HH>` subject, and the two digits its
 * counters end in (`r<MM>`, `e<MM>`, …). The settled calls' counters and the uptime probe's share it.
 */
export const minuteSlot = (epochMs: number): { day: string; subject: string; minute: string } => {
  const time = new Date(epochMs);
  return {
    day: utcDay(epochMs),
    subject: `minutes#${pad2(time.getUTCHours())}`,
    minute: pad2(time.getUTCMinutes()),
  };
};

/**
 * When the call ended (epoch ms, whole): when its outcome became known — a stream that breaks a minute after it
 * began failed then, not when it arrived. Minutes and faults are dated by it (ADR 0008).
 */
export const endedAt = (record: SettlementRecord): number => {
  const { receivedAt, totalMs } = record.timings;
  return Math.floor(receivedAt + (Number.isFinite(totalMs) && totalMs > 0 ? totalMs : 0));
};

export const aggregatesFor = (record: SettlementRecord): AggregateIncrement[] => {
  // The call's rows (model, funnel) are on the day it arrived, with its tokens, as the ledger dates it.
  const day = utcDay(record.timings.receivedAt);
  const success = isCharged(record.outcome);
  const fault = PLATFORM_FAULTS.has(record.outcome);
  // A model's row counts the faults filed under it (or under `incident`), not the platform's own: an unreachable
  // accounting store or an internal error says nothing of the model's providers.
  const rowFault = fault && funnelGroup(record) !== 'platform';
  const tokens = success && record.usage ? tokensOf(record.usage) : 0;
  const increments: AggregateIncrement[] = [];
  // A day's totals are the sum of its model rows; calls that never named a valid model get a row of their own.
  if (!record.model) {
    increments.push({
      day,
      subject: 'model#-',
      counters: { requests: 1, successes: 0, faults: rowFault ? 1 : 0, tokens: 0 },
    });
  } else {
    increments.push({
      day,
      subject: `model#${record.model}`,
      counters: {
        requests: 1,
        successes: success ? 1 : 0,
        faults: rowFault ? 1 : 0,
        tokens,
        promptTokens: success ? (record.usage?.promptTokens ?? 0) : 0,
        completionTokens: success ? (record.usage?.completionTokens ?? 0) : 0,
        // Audio models are billed in their own units, kept here for the operator (the public report counts tokens,
        // so an audio model's row shows its requests and 0 tokens).
        ...(success && record.usage?.audioMs ? { audioMs: record.usage.audioMs } : {}),
        ...(success && record.usage?.characters ? { characters: record.usage.characters } : {}),
        costNano: record.cost,
      },
    });
  }
  if (!success) {
    increments.push({
      day,
      subject: `status#${funnelGroup(record)}#${funnelStatus(record)}`,
      counters: { count: 1 },
    });
  }
  // The caller's own errors say nothing about the platform's health: they stay out of the minute counters.
  // Every call is counted in the minute it ended, successes as faults, so that a minute's failures are compared
  // with the calls that ended with them, and a minute once past is not rewritten by a call that fails later.
  // A fault that says nothing of availability either way (bearsOnAvailability) is not among the calls the platform
  // was asked to serve either: counted there it diluted the error rate of its minute.
  if (success || (fault && bearsOnAvailability(record))) {
    const { day: endDay, subject, minute } = minuteSlot(endedAt(record));
    const group = fault ? funnelGroup(record) : null;
    increments.push({
      day: endDay,
      subject,
      counters: {
        [`r${minute}`]: 1,
        ...(group === 'incident' ? { [`u${minute}`]: 1 } : {}),
        ...(group !== null && group !== 'incident' && funnelStatus(record) >= 500
          ? { [`e${minute}`]: 1 }
          : {}),
        ...(group !== null && group !== 'incident' && funnelStatus(record) === 429
          ? { [`o${minute}`]: 1 }
          : {}),
      },
    });
  }
  return increments;
};

/** How an upstream or platform failure is named in public: fixed words, never a message we did not write. */
const KIND_TEXT: Readonly<Record<string, string>> = {
  connect: 'connection refused',
  dropped: 'connection dropped',
  timeout: 'timed out',
  overloaded: 'overloaded',
  rate_limited: 'upstream quota exhausted',
  server_error: 'upstream server error',
  auth: 'upstream key refused',
  protocol: 'malformed upstream reply',
  rejected: 'request rejected upstream',
  unsupported: 'request not expressible by the provider',
  internal: 'internal error',
};

const AGENT_TEXT: Readonly<Record<number, string>> = {
  400: 'invalid request',
  401: 'missing or invalid API key',
  402: 'insufficient wallet balance',
  404: 'model not found',
  413: 'request too large',
  429: 'rate limit of the account’s tier',
};

const attemptsText = (calls: number): string => `${calls} attempt${calls === 1 ? '' : 's'}`;

/**
 * The public detail of a fault. Error messages can echo what the caller sent (an unknown model id, a
 * parameter name) or describe an account (a 402 names the balance), and upstream messages are not ours:
 * none of them is copied. The detail is composed from the outcome, the failure kind, the status and the
 * attempt count only, so it can name no user, key or account.
 */
export const faultDetail = (record: SettlementRecord): string => {
  // The last attempt's `auth` without a status is a key that could not be read, never sent: no refusal upstream.
  const last = record.attempts.at(-1);
  // Upstream calls made: not a deployment that could not express the request, nor an unreadable key.
  const calls = countUpstreamCalls(record.attempts);
  const kind =
    record.fault?.kind === 'auth' && last !== undefined && keyUnread(last)
      ? 'upstream key unavailable'
      : (KIND_TEXT[record.fault?.kind ?? ''] ?? 'internal error');
  switch (record.outcome) {
    case 'stream_interrupted':
      return `stream interrupted after the first byte: ${kind}`;
    case 'upstream_error':
      if (record.fault?.kind === 'deadline')
        return `no upstream answered within the longest time a call may take (${attemptsText(calls)})`;
      // Nothing reached an upstream (keys unreadable, requests no deployment could express): none "failed".
      return calls === 0
        ? `no deployment could be called (last: ${kind})`
        : `every deployment failed (${attemptsText(calls)}; last: ${kind})`;
    case 'overloaded':
      // None tried: every circuit was open on overloads, and the call was refused before any attempt.
      return calls === 0
        ? 'every deployment overloaded (circuits open)'
        : `every deployment overloaded (${attemptsText(calls)})`;
    case 'unavailable':
      if (record.fault?.kind === 'registry_empty') return 'no eligible model: the model registry is empty';
      if (record.fault?.kind === 'no_eligible_model') return 'no eligible model: no deployment can serve it';
      if (record.fault?.kind === 'circuits_open')
        return 'every upstream of the model failing (circuits open)';
      return 'accounting store unavailable: refused rather than served unmetered';
    case 'internal_error':
      return 'internal error';
    default:
      return AGENT_TEXT[record.status] ?? `client error ${record.status}`;
  }
};

/**
 * The entry a call leaves in the report's recent faults: only the platform's (or an upstream's) failures, as the
 * model rows count faults. The caller's own errors are counted in the error funnel but are not faults: listed,
 * anyone without a key could push every real fault out of the twenty with a burst of 401s.
 */
export const faultFor = (record: SettlementRecord): FaultEntry | null => {
  if (!PLATFORM_FAULTS.has(record.outcome)) return null;
  // Dated when the call failed, as its minute is: a broken stream is listed at its break, not its start.
  const at = endedAt(record);
  return {
    at,
    day: utcDay(at),
    requestId: record.requestId,
    group: funnelGroup(record),
    status: funnelStatus(record),
    detail: faultDetail(record),
  };
};

/** A usage-table subject, decoded (the inverse of the subjects written above). */
export type Subject =
  | { readonly type: 'model'; readonly model: string | null }
  | { readonly type: 'status'; readonly group: string; readonly status: number }
  | { readonly type: 'minutes'; readonly hour: number }
  | { readonly type: 'unknown' };

export const parseSubject = (subject: string): Subject => {
  if (subject.startsWith('model#')) {
    const model = subject.slice(6);
    return { type: 'model', model: model === '-' ? null : model };
  }
  if (subject.startsWith('status#')) {
    // Model ids cannot contain `#`, so the status is whatever follows the last one.
    const cut = subject.lastIndexOf('#');
    const status = Number(subject.slice(cut + 1));
    if (cut > 7 && Number.isInteger(status)) return { type: 'status', group: subject.slice(7, cut), status };
  }
  if (subject.startsWith('minutes#')) {
    const hour = Number(subject.slice(8));
    if (Number.isInteger(hour) && hour >= 0 && hour < 24) return { type: 'minutes', hour };
  }
  return { type: 'unknown' };
};
