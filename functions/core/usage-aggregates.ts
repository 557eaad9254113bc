import type { Outcome, SettlementRecord } from './settlement.ts';

/**
 * What each settled call adds to the anonymous usage aggregates the public report reads (spec §2.6). Keys
 * name a UTC day and a model or pseudo-group — never an account or a key.
 */
export interface AggregateIncrement {
  /** UTC day, `YYYY-MM-DD`. */
  readonly day: string;
  /** What is counted: `model#<id>` (`model#-` for calls without a valid model), or `status#<group>#<status>`. */
  readonly subject: string;
  readonly counters: Readonly<Record<string, number>>;
}

/** One fault for the report's recent-faults list. `detail` is operator text without user data. */
export interface FaultEntry {
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
 * Where a non-success lands in the error funnel: the caller's mistakes and tier refusals under `agent-error`
 * (counted apart from downtime, spec §7), upstream faults under their model, everything else under `platform`.
 */
export const funnelGroup = (record: SettlementRecord): string => {
  if (!PLATFORM_FAULTS.has(record.outcome)) return 'agent-error';
  if (record.outcome === 'unavailable' || record.outcome === 'internal_error') return 'platform';
  return record.model ?? 'platform';
};

/** A stream that broke after its 200 is a server fault, whatever its status line said. */
const funnelStatus = (record: SettlementRecord): number =>
  record.outcome === 'stream_interrupted' ? 500 : record.status;

export const aggregatesFor = (record: SettlementRecord): AggregateIncrement[] => {
  const day = utcDay(record.timings.receivedAt);
  const success = record.outcome === 'success' || record.outcome === 'client_aborted';
  const fault = PLATFORM_FAULTS.has(record.outcome);
  const tokens = success && record.usage ? record.usage.promptTokens + record.usage.completionTokens : 0;
  const increments: AggregateIncrement[] = [];
  // A day's totals are the sum of its model rows; calls that never named a valid model get a row of their own.
  if (!record.model) {
    increments.push({
      day,
      subject: 'model#-',
      counters: { requests: 1, successes: 0, faults: fault ? 1 : 0, tokens: 0 },
    });
  } else {
    increments.push({
      day,
      subject: `model#${record.model}`,
      counters: {
        requests: 1,
        successes: success ? 1 : 0,
        faults: fault ? 1 : 0,
        tokens,
        promptTokens: success ? (record.usage?.promptTokens ?? 0) : 0,
        completionTokens: success ? (record.usage?.completionTokens ?? 0) : 0,
        // Audio models are billed in their own units; the report shows them next to the tokens.
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
  return increments;
};

export const faultFor = (record: SettlementRecord): FaultEntry | null => {
  if (record.outcome === 'success' || record.outcome === 'client_aborted') return null;
  return {
    at: record.timings.receivedAt,
    day: utcDay(record.timings.receivedAt),
    requestId: record.requestId,
    group: funnelGroup(record),
    status: funnelStatus(record),
    detail: record.fault?.detail ?? record.outcome,
  };
};
