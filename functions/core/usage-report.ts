import { DEFAULT_INCIDENT_RULE, detectIncidents, type IncidentRule, type MinuteCounts } from './incidents.ts';
import type { Model } from './registry.ts';
import { type FaultEntry, parseSubject, utcDay } from './usage-aggregates.ts';

/**
 * The public usage report (spec §2.6): anonymous aggregates over a 30-day window, published as `/usage.json`
 * and read by the status page. Built from the usage table's rows by a pure function; the JSON Schema the site
 * publishes (`site/usage.schema.json`) is generated from the zod schema of http/schemas/usage-report.ts.
 */

export const REPORT_WINDOW_DAYS = 30;
/** How many of the most recent faults the report lists. */
export const RECENT_FAULTS = 20;
/** The service's own family (routers and aliases): not a model family with a frontier of its own. */
export const SERVICE_FAMILY = 'svc';

const DAY_MS = 86_400_000;
const MINUTE_MS = 60_000;

export type ModelStatus = 'up' | 'degraded recently' | 'live';
/** A model row's status: also `retired`, for a model called in the window that the registry no longer serves. */
export type RowStatus = ModelStatus | 'retired';

export interface UsageReport {
  readonly version: 1;
  /** ISO 8601 UTC. */
  readonly generated_at: string;
  readonly window: { readonly days: number; readonly start: string; readonly end: string };
  readonly totals: {
    readonly requests: number;
    readonly tokens: number;
    readonly models_active: number;
    readonly days_serving: number;
    readonly uptime_percent: number;
    readonly downtime_minutes: number;
  };
  readonly incidents: readonly {
    readonly name: string;
    readonly severity: 'MAJOR' | 'MINOR';
    readonly status: 'ONGOING' | 'RESOLVED';
    readonly start: string;
    /** Null while the incident is ongoing. */
    readonly end: string | null;
    readonly downtime_minutes: number;
  }[];
  readonly tokens_per_day: readonly { readonly day: string; readonly tokens: number }[];
  readonly models: readonly {
    readonly id: string;
    readonly requests: number;
    readonly tokens: number;
    readonly uptime_percent: number;
    readonly faults: number;
    readonly status: RowStatus;
  }[];
  readonly frontier_models: readonly {
    readonly id: string;
    readonly family: string;
    readonly requests: number;
    readonly tokens: number;
    readonly status: ModelStatus;
  }[];
  readonly error_funnel: readonly {
    readonly group: string;
    readonly status: number;
    readonly count: number;
    readonly label: string;
  }[];
  readonly recent_faults: readonly {
    readonly at: string;
    readonly group: string;
    readonly status: number;
    readonly detail: string;
  }[];
}

/** One usage-table subject of one day, its counters summed over shards. */
export interface AggregateRow {
  readonly day: string;
  readonly subject: string;
  readonly counters: Readonly<Record<string, number>>;
}

/** Reads what settlement wrote to the usage table. */
export interface UsageSource {
  /** Every aggregate row of these UTC days. */
  rows(days: readonly string[]): Promise<AggregateRow[]>;
  /** One UTC hour's minute counters (the `minutes#<HH>` subject) of a day: the window's lookback (`lookbackHour`). */
  minuteRows(day: string, hour: number): Promise<AggregateRow[]>;
  /**
   * The `limit` most recent listed faults (not the caller's own errors) of these days (given newest first), up to
   * `untilMs`, newest first.
   */
  recentFaults(days: readonly string[], limit: number, untilMs: number): Promise<FaultEntry[]>;
}

/** An object as the site bucket holds it. */
export interface StoredObject {
  readonly body: string;
  /** Its version tag, for a put conditional on it (absent when the store gave none). */
  readonly etag?: string;
}

/** Where the report is published (the site bucket). */
export interface SitePublisher {
  /** The object at `key`; null when there is none. */
  get(key: string): Promise<StoredObject | null>;
  /**
   * Puts the object. With `expected`, only if the key still holds what was read — that etag, or (null) no object —
   * and false, nothing written, when another writer changed it meanwhile; without, unconditionally.
   */
  putJson(key: string, body: string, cacheControl: string, expected?: string | null): Promise<boolean>;
}

/** The `generated_at` of a stored report, epoch ms; NaN when its body has none that reads as a time. */
export const generatedAtOf = (body: string): number => {
  try {
    const at = (JSON.parse(body) as { generated_at?: unknown } | null)?.generated_at;
    return typeof at === 'string' ? Date.parse(at) : Number.NaN;
  } catch {
    return Number.NaN;
  }
};

/** The UTC days of the window ending at `now`, oldest first: today and the 29 before it. */
export const windowDays = (now: number, days = REPORT_WINDOW_DAYS): string[] =>
  Array.from({ length: days }, (_, i) => utcDay(now - (days - 1 - i) * DAY_MS));

/**
 * The hour before the window's first midnight (the last of the day before it): its minute counters are read so that
 * the window's first minutes are judged over their whole lookback (`IncidentRule.windowMinutes`, under an hour),
 * not over the part of it inside the window. Nothing in it is counted.
 */
export const lookbackHour = (now: number, days = REPORT_WINDOW_DAYS): { day: string; hour: number } => ({
  day: utcDay(now - days * DAY_MS),
  hour: 23,
});

/** Rounded down, so any downtime or fault shows below 100. */
const percent = (part: number, whole: number): number =>
  whole <= 0 ? 100 : Math.floor((100_000 * part) / whole) / 1000;

const iso = (ms: number): string => new Date(ms).toISOString();

/** The funnel's words for a (group, status) pair. */
export const funnelLabel = (group: string, status: number): string => {
  if (group === 'agent-error') {
    const labels: Record<number, string> = {
      400: 'invalid request',
      401: 'invalid API key',
      402: 'insufficient balance',
      404: 'model not found',
      413: 'request too large',
      429: 'tier rate limit (not downtime)',
    };
    return labels[status] ?? 'client error';
  }
  if (group === 'incident') return 'no eligible model (incident)';
  if (group === 'platform') return status === 503 ? 'accounting store unavailable' : 'platform fault';
  if (status === 429) return 'upstream overloaded';
  // A model's 503: nothing to route to, whether its circuits opened on failures or an operator drained every
  // deployment (weight 0). The funnel is keyed by status only, so its words must fit both.
  if (status === 503) return 'no deployment available (circuits open or drained)';
  if (status >= 500) return 'upstream fault after fallbacks';
  return 'upstream error';
};

interface ModelTotals {
  requests: number;
  successes: number;
  faults: number;
  tokens: number;
  /** Faults on the report's UTC day and the day before: "recently". */
  recentFaults: number;
}

export interface ReportInput {
  /** Generation time, epoch ms. */
  readonly now: number;
  /** The registry's models (active and retired). */
  readonly models: readonly Model[];
  readonly rows: readonly AggregateRow[];
  /** Most recent first; only the first RECENT_FAULTS are listed. */
  readonly recentFaults: readonly FaultEntry[];
  /**
   * Minute rows of the hour before the window (`lookbackHour`): the first minutes' lookback, never counted in the
   * totals nor judged themselves.
   */
  readonly lookback?: readonly AggregateRow[];
  readonly rule?: IncidentRule;
}

/**
 * The minutes of a `minutes#<HH>` row with any call in them. Only whole minutes before `now`: a report as of a past
 * moment (a replay, or a run that starts after its scheduled time) ends there, and the minute under way — its calls
 * still ending — is judged by the next run once it is over (judged half-way, it could open an incident the next run
 * takes back).
 */
const minutesOf = (row: AggregateRow, hour: number, now: number): MinuteCounts[] => {
  const c = (name: string) => row.counters[name] ?? 0;
  const hourStart = Date.parse(`${row.day}T00:00:00Z`) + hour * 3_600_000;
  const minutes: MinuteCounts[] = [];
  for (let minute = 0; minute < 60; minute++) {
    const mm = String(minute).padStart(2, '0');
    const at = hourStart + minute * MINUTE_MS;
    if (at + MINUTE_MS > now) break;
    const counts = {
      requests: c(`r${mm}`),
      serverErrors: c(`e${mm}`),
      noEligible: c(`u${mm}`),
      overloaded: c(`o${mm}`),
      probeChecks: c(`pc${mm}`),
      probeFailed: c(`pf${mm}`),
    };
    if (counts.requests + counts.serverErrors + counts.noEligible + counts.probeFailed === 0) continue;
    minutes.push({ at, ...counts });
  }
  return minutes;
};

/**
 * Builds the report. Definitions (README, ADR 0008):
 * - requests: every settled POST call; tokens: prompt + completion tokens of successful calls;
 * - models active: models with at least one success in the window; days serving: UTC days with one;
 * - uptime: minutes of the 30-day window not inside an incident (see incidents.ts);
 * - a model's uptime: successes / (successes + faults), faults being upstream and platform failures
 *   (not the caller's errors); its status `degraded recently` with a fault on the report's UTC day or the day
 *   before, else `up` if it served anything in the window, else `live` (listed, routable, nothing to measure);
 * - frontier models: per family except the service's own, the newest active chat model (largest `created`;
 *   ties go to the highest output rate, then the highest id).
 */
export const buildUsageReport = (input: ReportInput): UsageReport => {
  const { now } = input;
  const days = windowDays(now);
  const inWindow = new Set(days);
  const recentDays = new Set([utcDay(now), utcDay(now - DAY_MS)]);

  const models = new Map<string, ModelTotals>();
  const tokensByDay = new Map<string, number>(days.map((d) => [d, 0]));
  const servingDays = new Set<string>();
  const funnel = new Map<string, { group: string; status: number; count: number }>();
  const minutes: MinuteCounts[] = [];
  let requests = 0;

  for (const row of input.rows) {
    if (!inWindow.has(row.day)) continue;
    const c = (name: string) => row.counters[name] ?? 0;
    const subject = parseSubject(row.subject);
    if (subject.type === 'model') {
      requests += c('requests');
      tokensByDay.set(row.day, (tokensByDay.get(row.day) ?? 0) + c('tokens'));
      if (c('successes') > 0) servingDays.add(row.day);
      if (subject.model === null) continue;
      const totals = models.get(subject.model) ?? {
        requests: 0,
        successes: 0,
        faults: 0,
        tokens: 0,
        recentFaults: 0,
      };
      totals.requests += c('requests');
      totals.successes += c('successes');
      totals.faults += c('faults');
      totals.tokens += c('tokens');
      if (recentDays.has(row.day)) totals.recentFaults += c('faults');
      models.set(subject.model, totals);
    } else if (subject.type === 'status') {
      const key = `${subject.group}#${subject.status}`;
      const entry = funnel.get(key) ?? { group: subject.group, status: subject.status, count: 0 };
      entry.count += c('count');
      funnel.set(key, entry);
    } else if (subject.type === 'minutes') {
      minutes.push(...minutesOf(row, subject.hour, now));
    }
  }
  // The window's first minutes look back into the day before it: its last hour's minutes are read for that only.
  const windowStart = Date.parse(`${days[0]}T00:00:00Z`);
  for (const row of input.lookback ?? []) {
    const subject = parseSubject(row.subject);
    if (subject.type !== 'minutes') continue;
    for (const m of minutesOf(row, subject.hour, now)) if (m.at < windowStart) minutes.push(m);
  }

  const incidents = detectIncidents(minutes, now, input.rule ?? DEFAULT_INCIDENT_RULE, windowStart);
  const downtime = incidents.reduce((sum, i) => sum + i.downtimeMinutes, 0);
  // The minutes the window measured: from its first day's midnight to `now`'s last whole minute (under 30 × 1440
  // until the day's end), so a platform down for all of them reports 0 %.
  const windowMinutes = Math.max(1, Math.floor((now - windowStart) / MINUTE_MS));

  const empty: ModelTotals = { requests: 0, successes: 0, faults: 0, tokens: 0, recentFaults: 0 };
  // A model whose every call in the window failed is not "live" (nothing measured): it is degraded, however
  // long ago the failures were.
  const statusOf = (t: ModelTotals): ModelStatus =>
    t.recentFaults > 0 || (t.faults > 0 && t.successes === 0)
      ? 'degraded recently'
      : t.successes > 0
        ? 'up'
        : 'live';

  // Every model the registry lists, and every model that was called in the window (even if retired since).
  const listed = input.models.filter((m) => m.status === 'active').map((m) => m.id);
  const served = new Set(listed);
  // Retired: listed so, or gone from a registry that serves others. A registry read as empty (spec §7's incident)
  // retires nothing: its models answer 503 meanwhile, not 404, and come back.
  const retired = new Set(input.models.filter((m) => m.status === 'retired').map((m) => m.id));
  const isRetired = (id: string): boolean => retired.has(id) || (listed.length > 0 && !served.has(id));
  const modelIds = [...new Set([...listed, ...models.keys()])];
  const modelRows = modelIds
    .map((id) => {
      const t = models.get(id) ?? empty;
      return {
        id,
        requests: t.requests,
        tokens: t.tokens,
        uptime_percent: percent(t.successes, t.successes + t.faults),
        faults: t.faults,
        // Its numbers stay, for the window they cover; its status says it is not to be called now.
        status: isRetired(id) ? ('retired' as const) : statusOf(t),
      };
    })
    .sort((a, b) => b.requests - a.requests || b.tokens - a.tokens || a.id.localeCompare(b.id));

  const frontier = new Map<string, Model>();
  for (const m of input.models) {
    if (m.kind !== 'chat' || m.status !== 'active' || m.family === SERVICE_FAMILY) continue;
    const best = frontier.get(m.family);
    if (!best || newer(m, best)) frontier.set(m.family, m);
  }

  return {
    version: 1,
    generated_at: iso(now),
    window: { days: REPORT_WINDOW_DAYS, start: iso(windowStart), end: iso(now) },
    totals: {
      requests,
      tokens: [...tokensByDay.values()].reduce((a, b) => a + b, 0),
      models_active: [...models.values()].filter((t) => t.successes > 0).length,
      days_serving: servingDays.size,
      uptime_percent: percent(windowMinutes - downtime, windowMinutes),
      downtime_minutes: downtime,
    },
    incidents: incidents.map((i) => ({
      name: i.name,
      severity: i.severity,
      status: i.status,
      start: iso(i.start),
      end: i.status === 'ONGOING' ? null : iso(i.end),
      downtime_minutes: i.downtimeMinutes,
    })),
    tokens_per_day: days.map((day) => ({ day, tokens: tokensByDay.get(day) ?? 0 })),
    models: modelRows,
    frontier_models: [...frontier.values()]
      .sort((a, b) => a.family.localeCompare(b.family))
      .map((m) => {
        const t = models.get(m.id) ?? empty;
        return { id: m.id, family: m.family, requests: t.requests, tokens: t.tokens, status: statusOf(t) };
      }),
    error_funnel: [...funnel.values()]
      .filter((f) => f.count > 0)
      .sort((a, b) => b.count - a.count || a.group.localeCompare(b.group) || a.status - b.status)
      .map((f) => ({ ...f, label: funnelLabel(f.group, f.status) })),
    recent_faults: [...input.recentFaults]
      // The source leaves these out already (UsageSource.recentFaults); kept as the report's own rule.
      .filter((f) => f.group !== 'agent-error' && f.at <= now)
      .sort((a, b) => b.at - a.at)
      .slice(0, RECENT_FAULTS)
      // To the second: the millisecond a stranger's call failed is more than a reader of the page needs.
      .map((f) => ({
        at: iso(Math.floor(f.at / 1000) * 1000),
        group: f.group,
        status: f.status,
        detail: f.detail,
      })),
  };
};

const newer = (a: Model, b: Model): boolean => {
  if (a.created !== b.created) return a.created > b.created;
  const rate = (m: Model) => m.rates.output ?? m.rates.input;
  if (rate(a) !== rate(b)) return rate(a) > rate(b);
  return a.id > b.id;
};
