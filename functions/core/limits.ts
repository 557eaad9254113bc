/**
 * Per-account rate limits (spec §8) as GCRA token buckets: one theoretical arrival time (TAT) per dimension.
 * A dimension with limit L per period T has emission interval E = T / L (rounded up to a whole µs); a charge
 * of n units is admitted when max(TAT, now) + n·E ≤ now + L·E, which admits a burst of L from idle and then
 * one unit every E.
 * Times are integer microseconds so token dimensions (E of a few hundred µs) stay exact.
 */

export type Tier = 'unverified' | 'trusted';
export type Dimension = 'rpm' | 'rpd' | 'tpm' | 'tpd';
export type Limits = Readonly<Record<Dimension, number>>;

export const DIMENSIONS: readonly Dimension[] = ['rpm', 'rpd', 'tpm', 'tpd'];

const MINUTE_US = 60_000_000;
const DAY_US = 86_400_000_000;

export const PERIOD_US: Readonly<Record<Dimension, number>> = {
  rpm: MINUTE_US,
  rpd: DAY_US,
  tpm: MINUTE_US,
  tpd: DAY_US,
};

/** Spec §8. The detailed tier table's 1000 RPM for trusted accounts is the one used (the spec says so). */
export const TIER_LIMITS: Readonly<Record<Tier, Limits>> = {
  unverified: { rpm: 30, rpd: 300, tpm: 100_000, tpd: 1_000_000 },
  trusted: { rpm: 1000, rpd: 20_000, tpm: 2_000_000, tpd: 50_000_000 },
};

/** A volume account's custom quota replaces its tier's limits, dimension by dimension. */
export const limitsFor = (tier: Tier, quota?: Partial<Limits> | null): Limits => ({
  ...TIER_LIMITS[tier],
  ...quota,
});

/**
 * An operator's change of a custom quota: a number sets its dimension, null gives it back to the tier's limit, and a
 * dimension not named keeps what it has.
 */
export type QuotaChange = Partial<Record<Dimension, number | null>>;

/**
 * The custom quota a change makes of the current one. Merged, not replaced: raising one limit must not drop the
 * others an operator set before. Null when nothing custom is left (the tier's limits, as with no quota at all).
 */
export const mergeQuota = (current: Partial<Limits> | null, change: QuotaChange): Partial<Limits> | null => {
  const merged: Partial<Record<Dimension, number>> = {};
  for (const d of DIMENSIONS) {
    const value = change[d] === undefined ? current?.[d] : change[d];
    if (value !== undefined && value !== null) merged[d] = value;
  }
  return Object.keys(merged).length === 0 ? null : merged;
};

/** Whether two custom quotas set the same limits (null and an empty one alike: the tier's). */
export const sameQuota = (a: Partial<Limits> | null, b: Partial<Limits> | null): boolean =>
  DIMENSIONS.every((d) => a?.[d] === b?.[d]);

/** Microseconds of bucket per unit; rounded up so rounding never lets the sustained rate exceed the limit. */
export const emissionUs = (dimension: Dimension, limit: number): number =>
  Math.ceil(PERIOD_US[dimension] / limit);

/** Largest custom quota a dimension takes: past it the JSON number, and a header's parse, lose digits. */
export const MAX_QUOTA = 1_000_000_000_000;

/**
 * Why `value` cannot be a custom quota of `dimension`, or null when it can. Buckets count whole microseconds per
 * unit, so a limit whose interval is not a whole number of µs is enforced at the rate of the rounded-up interval:
 * 40,000,000 tokens a minute (1.5 µs) would run at 30,000,000. A quota enforced more than 1 % below what it says
 * is refused, naming the nearest ones that hold.
 */
export const quotaProblem = (dimension: Dimension, value: number): string | null => {
  if (!Number.isSafeInteger(value) || value < 1 || value > MAX_QUOTA)
    return `${dimension} must be a whole number from 1 to ${MAX_QUOTA}`;
  const enforced = Math.floor(PERIOD_US[dimension] / emissionUs(dimension, value));
  if (enforced >= value * 0.99) return null;
  const below = Math.floor(PERIOD_US[dimension] / Math.ceil(PERIOD_US[dimension] / value));
  const above = Math.floor(PERIOD_US[dimension] / Math.floor(PERIOD_US[dimension] / value));
  return (
    `${dimension} ${value} would be enforced as ${enforced}: the limits count whole microseconds per unit. ` +
    `Choose one whose interval is whole, e.g. ${below}${above !== below && Number.isFinite(above) ? ` or ${above}` : ''}`
  );
};

/**
 * The bucket's depth: `limit` units' worth of intervals. Equal to the period when the interval divides it
 * exactly, a hair longer when it was rounded up — so a burst of exactly `limit` always fits.
 */
export const capacityUs = (dimension: Dimension, limit: number): number =>
  limit * emissionUs(dimension, limit);

/** Bucket state: the TAT of each dimension in epoch µs (absent: never used, i.e. full). */
export type BucketState = Partial<Record<Dimension, number>>;

/** Units charged per dimension by one call. */
export type Charges = Readonly<Record<Dimension, number>>;

export const chargesFor = (estimatedTokens: number): Charges => ({
  rpm: 1,
  rpd: 1,
  tpm: estimatedTokens,
  tpd: estimatedTokens,
});

export interface DimensionCheck {
  readonly dimension: Dimension;
  readonly allowed: boolean;
  /** Increment of the TAT if admitted. */
  readonly incrementUs: number;
  /** TAT after admission (when allowed). */
  readonly newTatUs: number;
  /** The largest TAT before admission that still admits this charge. */
  readonly maxPriorTatUs: number;
  /** When refused: how long until the charge would fit (0 if it never can: larger than the whole limit). */
  readonly retryAfterUs: number;
  /** Never admissible: the charge alone exceeds the dimension's limit. */
  readonly exceedsLimit: boolean;
}

export const checkDimension = (
  dimension: Dimension,
  limit: number,
  tatUs: number | undefined,
  units: number,
  nowUs: number,
): DimensionCheck => {
  const capacity = capacityUs(dimension, limit);
  const incrementUs = units * emissionUs(dimension, limit);
  const base = Math.max(tatUs ?? nowUs, nowUs);
  const newTatUs = base + incrementUs;
  const maxPriorTatUs = nowUs + capacity - incrementUs;
  const exceedsLimit = units > limit;
  // A call that takes nothing of a dimension (an audio call's tokens) is not refused by it, however far ahead
  // its bucket runs: there is nothing to wait for. Admission leaves such a bucket untouched.
  const allowed = units === 0 || (!exceedsLimit && newTatUs <= nowUs + capacity);
  return {
    dimension,
    allowed,
    incrementUs,
    newTatUs,
    maxPriorTatUs,
    retryAfterUs: allowed || exceedsLimit ? 0 : newTatUs - (nowUs + capacity),
    exceedsLimit,
  };
};

/**
 * Bucket state carried across a change of limits (a tier upgrade). A TAT's backlog is the units spent times the
 * old emission interval; read with the new interval it would count as another number of units (30 requests of
 * an unverified minute, 60 s of backlog, would fill a trusted minute of 1000). Rescaled, the backlog counts the
 * same units under the new limits. Returns the TATs that change, rounded up (never fewer units than spent).
 */
export const rescaleBuckets = (state: BucketState, from: Limits, to: Limits, nowUs: number): BucketState => {
  const rescaled: BucketState = {};
  for (const d of DIMENSIONS) {
    const tat = state[d];
    if (tat === undefined || tat <= nowUs || from[d] === to[d]) continue;
    rescaled[d] = nowUs + Math.ceil(((tat - nowUs) * emissionUs(d, to[d])) / emissionUs(d, from[d]));
  }
  return rescaled;
};

export interface LimitStatus {
  readonly limit: number;
  readonly remaining: number;
  /** Until the bucket is full again. */
  readonly resetUs: number;
}

/** What the `x-ratelimit-*` headers report for a dimension in a given state. */
export const statusOf = (
  dimension: Dimension,
  limit: number,
  tatUs: number | undefined,
  nowUs: number,
): LimitStatus => {
  const emission = emissionUs(dimension, limit);
  const used = Math.max((tatUs ?? nowUs) - nowUs, 0);
  return {
    limit,
    remaining: Math.max(0, Math.min(limit, Math.floor((capacityUs(dimension, limit) - used) / emission))),
    resetUs: used,
  };
};

/**
 * Durations the way OpenAI writes them in `x-ratelimit-reset-*` (Go's format, to the millisecond): `0s`, `20ms`,
 * `1.5s`, `6m0s`, `1h2m3s`.
 */
export const formatDuration = (us: number): string => {
  const totalMs = Math.ceil(us / 1000);
  if (totalMs === 0) return '0s';
  if (totalMs < 1000) return `${totalMs}ms`;
  if (totalMs < 60_000) return `${Number((totalMs / 1000).toFixed(3))}s`;
  const totalSeconds = Math.ceil(totalMs / 1000);
  const h = Math.floor(totalSeconds / 3600);
  const m = Math.floor((totalSeconds % 3600) / 60);
  const s = totalSeconds % 60;
  return h > 0 ? `${h}h${m}m${s}s` : `${m}m${s}s`;
};
