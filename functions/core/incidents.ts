/**
 * Incident detection over the per-minute counters the settlement consumer keeps (ADR 0008). Pure: the
 * report handler reads the counters, this decides which minutes were down and how they group into incidents.
 */

const MINUTE_MS = 60_000;

/** What one UTC minute saw, from the usage table's `minutes#<HH>` items. */
export interface MinuteCounts {
  /** Epoch ms of the minute's start. */
  readonly at: number;
  /**
   * Calls the platform was asked to serve: successes and platform faults — not the caller's own errors, nor faults
   * that say nothing of availability (a model with no deployment, a call cut at the longest a call may take).
   */
  readonly requests: number;
  /** 5xx answered for a model or the `platform` group (upstream faults after fallbacks, broken streams, …). */
  readonly serverErrors: number;
  /** 503s of a registry that read as empty: nothing could be served, whatever the model. */
  readonly noEligible: number;
  /**
   * 429 `engine_overloaded` answered after every deployment was tried: failed calls, though not down-time on their
   * own (overload is load, not an outage), so they count towards "every call failed" and the failure rate named.
   */
  readonly overloaded?: number;
  /** Checks the uptime probe's round made in this minute, when any failed (core/uptime-probe.ts); 0 or absent: none. */
  readonly probeChecks?: number;
  /**
   * Which of them failed: bit `i` for check `i` (a failed check failed twice, 2 s apart), and bit `probeChecks`
   * when the key lookup's failure was the key store's (a 503: every call reads it).
   */
  readonly probeFailed?: number;
}

export interface IncidentRule {
  /** Length of the sliding window the error rate is measured over, minutes. */
  readonly windowMinutes: number;
  /** Share of the window's requests, less those turned away for load, that must have failed with a 5xx (0–1). */
  readonly errorRate: number;
  /** …and at least this many 5xx in the window, so one failed call on a quiet night is not an outage. */
  readonly minErrors: number;
  /** Down minutes closer than this (minutes between them) belong to the same incident. */
  readonly mergeGapMinutes: number;
  /** An incident is RESOLVED once this many minutes have passed since its last down minute. */
  readonly resolveAfterMinutes: number;
}

export const DEFAULT_INCIDENT_RULE: IncidentRule = {
  windowMinutes: 5,
  errorRate: 0.5,
  minErrors: 3,
  mergeGapMinutes: 5,
  resolveAfterMinutes: 5,
};

export type Severity = 'MAJOR' | 'MINOR';
export type IncidentStatus = 'ONGOING' | 'RESOLVED';

export interface Incident {
  readonly name: string;
  readonly severity: Severity;
  readonly status: IncidentStatus;
  /** Epoch ms: start of the first down minute. */
  readonly start: number;
  /** Epoch ms: end of the last down minute. */
  readonly end: number;
  readonly downtimeMinutes: number;
}

const floorMinute = (ms: number): number => Math.floor(ms / MINUTE_MS) * MINUTE_MS;

/**
 * A minute is **down** when
 * - any call in it got the 503 of a registry that read as empty (nothing could be served), or
 * - it had a 5xx itself, and over the `windowMinutes` ending with it at least `minErrors` calls failed with a
 *   5xx and they were at least `errorRate` of the calls not turned away for load (429 `engine_overloaded`; quiet
 *   minutes count as zero), or
 * - a check of the uptime probe failed in it, and the same check failed in at least `minErrors` of the
 *   `windowMinutes` rounds ending with it: an endpoint (or the key store) that keeps failing is down whatever the
 *   traffic elsewhere, and one round lost to a blip is not. Checks are not calls: they do not dilute the calls' rate.
 *
 * Down minutes less than `mergeGapMinutes` apart form one incident, whose downtime is its number of down
 * minutes. It is MAJOR if in any of its minutes nothing could be served (an empty registry's 503; every call failed
 * in a minute the calls made down; every check of the probe, or the key store, kept failing), MINOR otherwise; ONGOING until `resolveAfterMinutes` have passed since its last down minute.
 * Incidents are returned newest first.
 *
 * Minutes before `judgedFrom` are context only: they fill the sliding window of the first judged minutes (the
 * report's window starts at a midnight, and its first minutes look back into the day before), but are never judged
 * themselves, so no incident starts before it.
 */
export const detectIncidents = (
  minutes: readonly MinuteCounts[],
  now: number,
  rule: IncidentRule = DEFAULT_INCIDENT_RULE,
  judgedFrom = Number.NEGATIVE_INFINITY,
): Incident[] => {
  const byMinute = new Map<number, MinuteCounts>();
  for (const m of minutes) {
    const at = floorMinute(m.at);
    const seen = byMinute.get(at);
    byMinute.set(
      at,
      seen
        ? {
            at,
            requests: seen.requests + m.requests,
            serverErrors: seen.serverErrors + m.serverErrors,
            noEligible: seen.noEligible + m.noEligible,
            overloaded: (seen.overloaded ?? 0) + (m.overloaded ?? 0),
            probeChecks: Math.max(seen.probeChecks ?? 0, m.probeChecks ?? 0),
            probeFailed: ((seen.probeFailed ?? 0) | (m.probeFailed ?? 0)) >>> 0,
          }
        : { ...m, at },
    );
  }
  const downByCalls = (m: MinuteCounts): boolean => {
    if (m.serverErrors === 0) return false;
    let requests = 0;
    let errors = 0;
    let overloaded = 0;
    for (let i = 0; i < rule.windowMinutes; i++) {
      const w = byMinute.get(m.at - i * MINUTE_MS);
      requests += w?.requests ?? 0;
      errors += w?.serverErrors ?? 0;
      overloaded += w?.overloaded ?? 0;
    }
    // The 5xx are judged against the calls that were not turned away for load: a minute of 4 upstream 500s and 6
    // all-busy 429s served nothing, and read 40 % failed counting every call. Overload stays no outage of its own —
    // one busy model's 429s do not make 3 broken streams elsewhere an outage, as counting them as failures would.
    return errors >= rule.minErrors && errors >= rule.errorRate * (requests - overloaded);
  };
  /** Probe bit `bit` failed in this minute and in at least `minErrors` of the rounds of the window ending with it. */
  const persists = (m: MinuteCounts, bit: number): boolean => {
    if (((m.probeFailed ?? 0) & bit) === 0) return false;
    let rounds = 0;
    for (let i = 0; i < rule.windowMinutes; i++)
      if (((byMinute.get(m.at - i * MINUTE_MS)?.probeFailed ?? 0) & bit) !== 0) rounds++;
    return rounds >= rule.minErrors;
  };
  const judged: JudgedMinute[] = [];
  for (const m of [...byMinute.values()].sort((a, b) => a.at - b.at)) {
    if (m.at < judgedFrom) continue;
    const checks = m.probeChecks ?? 0;
    const failing: boolean[] = [];
    for (let i = 0; i <= checks && i < MAX_PROBE_BITS; i++) failing.push(persists(m, 2 ** i));
    const byCalls = m.noEligible > 0 || downByCalls(m);
    if (!byCalls && !failing.includes(true)) continue;
    judged.push({
      ...m,
      byCalls,
      // Every check, each for 3 of the last 5 rounds: not one blip round in which all of them failed.
      unreachable: checks > 0 && failing.slice(0, checks).every(Boolean),
      storeDown: checks > 0 && failing[checks] === true,
    });
  }

  const groups: JudgedMinute[][] = [];
  for (const m of judged) {
    const current = groups.at(-1);
    const last = current?.at(-1);
    if (current && last && m.at - (last.at + MINUTE_MS) < rule.mergeGapMinutes * MINUTE_MS) current.push(m);
    else groups.push([m]);
  }
  return groups.map((group) => describe(group, now, rule)).sort((a, b) => b.start - a.start);
};

/** Bits of `probeFailed`: the probe's checks and the key store's bit after them (core/uptime-probe.ts). */
const MAX_PROBE_BITS = 31;

/** A down minute and the evidence that made it down. */
interface JudgedMinute extends MinuteCounts {
  /** Down on the calls' own evidence (their 5xx rate, or an empty registry's 503). */
  readonly byCalls: boolean;
  /** Every check of the probe kept failing: the public API answers nothing it should. */
  readonly unreachable: boolean;
  /** The key lookup kept answering 503: the key store every call reads cannot be reached. */
  readonly storeDown: boolean;
}

const describe = (group: readonly JudgedMinute[], now: number, rule: IncidentRule): Incident => {
  const first = group[0] as JudgedMinute;
  const last = group.at(-1) as JudgedMinute;
  const end = last.at + MINUTE_MS;
  const noEligible = group.some((m) => m.noEligible > 0);
  const failedIn = (m: MinuteCounts) => m.serverErrors + m.noEligible + (m.overloaded ?? 0);
  // Only the evidence that made a minute down says how bad it was: a minute down on the probe's word is not made
  // MAJOR by its one failed call, nor a minute down on the calls' by one round of the probe that failed whole.
  const byCalls = group.filter((m) => m.byCalls);
  const nothingServed =
    byCalls.some((m) => m.requests > 0 && failedIn(m) >= m.requests) ||
    group.some((m) => m.unreachable || m.storeDown);
  let name: string;
  if (noEligible) name = 'Service unavailable: no eligible model (503)';
  else if (byCalls.length > 0) {
    const requests = byCalls.reduce((sum, m) => sum + m.requests, 0);
    const errors = byCalls.reduce((sum, m) => sum + failedIn(m), 0);
    name = `Elevated error rate: ${Math.round((100 * errors) / Math.max(1, requests))}% of calls failed`;
  }
  // Down on the probe's word alone: what a platform that answers nothing, a store nothing can read, or an endpoint
  // that cannot start looks like (none of them settles a call).
  else if (group.some((m) => m.storeDown)) name = 'Service unavailable: the key store cannot be reached';
  else if (group.some((m) => m.unreachable)) name = 'Service unreachable: every uptime check failed';
  else name = 'Partial outage: an endpoint failed its uptime checks';
  return {
    name,
    severity: noEligible || nothingServed ? 'MAJOR' : 'MINOR',
    status: now - end < rule.resolveAfterMinutes * MINUTE_MS ? 'ONGOING' : 'RESOLVED',
    start: first.at,
    end,
    downtimeMinutes: group.length,
  };
};
