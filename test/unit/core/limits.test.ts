import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { rateLimitHeaders } from '#core/admission.ts';
import {
  checkDimension,
  DIMENSIONS,
  emissionUs,
  formatDuration,
  limitsFor,
  mergeQuota,
  PERIOD_US,
  quotaProblem,
  rescaleBuckets,
  statusOf,
  TIER_LIMITS,
} from '#core/limits.ts';

const NOW = 1_800_000_000_000_000;

/** Replays a burst through checkDimension the way the store applies it. */
const burst = (limit: number, count: number, units = 1) => {
  let tat: number | undefined;
  const admitted: boolean[] = [];
  for (let i = 0; i < count; i++) {
    const check = checkDimension('rpm', limit, tat, units, NOW);
    admitted.push(check.allowed);
    if (check.allowed) tat = check.newTatUs;
  }
  return { admitted, tat };
};

describe('GCRA', () => {
  it('admits a burst of exactly the limit from idle, then refuses', () => {
    const { admitted } = burst(30, 31);
    expect(admitted.slice(0, 30).every(Boolean)).toBe(true);
    expect(admitted[30]).toBe(false);
  });

  it('tells a refused request how long until one unit drains', () => {
    const { tat } = burst(30, 30);
    const refused = checkDimension('rpm', 30, tat, 1, NOW);
    expect(refused.allowed).toBe(false);
    // 30 per minute: one unit drains every 2 s.
    expect(refused.retryAfterUs).toBe(2_000_000);
    expect(checkDimension('rpm', 30, tat, 1, NOW + refused.retryAfterUs).allowed).toBe(true);
  });

  it('charges token dimensions by the units requested', () => {
    const half = checkDimension('tpm', 100_000, undefined, 50_000, NOW);
    expect(half.allowed).toBe(true);
    expect(checkDimension('tpm', 100_000, half.newTatUs, 50_000, NOW).allowed).toBe(true);
    expect(checkDimension('tpm', 100_000, half.newTatUs + half.incrementUs, 1, NOW).allowed).toBe(false);
  });

  it('never refuses a call that takes none of a dimension, however far past its limit the bucket runs', () => {
    // A settlement charged far more than the estimate: the minute's bucket is a day ahead.
    const dayAhead = NOW + 86_400_000_000;
    expect(checkDimension('tpm', 100_000, dayAhead, 0, NOW)).toMatchObject({
      allowed: true,
      retryAfterUs: 0,
    });
    expect(checkDimension('tpm', 100_000, dayAhead, 1, NOW).allowed).toBe(false);
  });

  it('never admits a single charge larger than the whole limit, and says retrying will not help', () => {
    const check = checkDimension('tpm', 100_000, undefined, 100_001, NOW);
    expect(check).toMatchObject({ allowed: false, exceedsLimit: true, retryAfterUs: 0 });
  });

  it('rounds the emission interval up, so rounding never grants more than the limit', () => {
    expect(emissionUs('tpm', 7)).toBe(Math.ceil(PERIOD_US.tpm / 7));
    expect(burst(7, 8).admitted.filter(Boolean)).toHaveLength(7);
  });
});

describe('limits', () => {
  it('follow spec §8 per tier, 1000 RPM for trusted', () => {
    expect(TIER_LIMITS.unverified).toEqual({ rpm: 30, rpd: 300, tpm: 100_000, tpd: 1_000_000 });
    expect(TIER_LIMITS.trusted).toEqual({ rpm: 1000, rpd: 20_000, tpm: 2_000_000, tpd: 50_000_000 });
  });

  it('let a volume account’s custom quota replace its tier’s, dimension by dimension', () => {
    expect(limitsFor('trusted', { rpm: 10_000 })).toEqual({ ...TIER_LIMITS.trusted, rpm: 10_000 });
  });
});

describe('a change of a custom quota', () => {
  it('sets the dimensions given, gives those set to null back to the tier, and keeps the others', () => {
    const current = { rpm: 5000, tpm: 10_000_000 };
    expect(mergeQuota(current, { tpd: 4_800_000_000 })).toEqual({
      rpm: 5000,
      tpm: 10_000_000,
      tpd: 4_800_000_000,
    });
    expect(mergeQuota(current, { rpm: null, tpm: 20_000_000 })).toEqual({ tpm: 20_000_000 });
    expect(mergeQuota(null, { rpd: 2_000_000 })).toEqual({ rpd: 2_000_000 });
    // Nothing custom left: the tier's limits, as with no quota at all.
    expect(mergeQuota(current, { rpm: null, tpm: null })).toBeNull();
    expect(mergeQuota(null, { rpm: null })).toBeNull();
  });

  it('holds for the example README.md gives operators, value by value', () => {
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
    const example = readme.split('\n').find((line) => line.startsWith('npm run admin -- accounts quota '));
    const flags = [...(example?.split('#')[0] ?? '').matchAll(/--(rpm|rpd|tpm|tpd) (\S+)/g)];
    expect(flags.map(([, dimension]) => dimension)).toEqual(DIMENSIONS);
    for (const [, dimension, value] of flags)
      expect(quotaProblem(dimension as (typeof DIMENSIONS)[number], Number(value))).toBeNull();
  });
});

describe('a change of limits', () => {
  it('carries the units spent, not the backlog in time, and leaves drained and unchanged buckets alone', () => {
    const from = TIER_LIMITS.unverified;
    const to = TIER_LIMITS.trusted;
    const state = {
      rpm: NOW + 10 * emissionUs('rpm', from.rpm), // 10 requests in the unverified minute
      rpd: NOW - 5, // drained
      tpm: NOW + 1_000 * emissionUs('tpm', from.tpm),
    };
    const rescaled = rescaleBuckets(state, from, to, NOW);
    expect(rescaled).toEqual({
      rpm: NOW + 10 * emissionUs('rpm', to.rpm),
      tpm: NOW + 1_000 * emissionUs('tpm', to.tpm),
    });
    expect(statusOf('rpm', to.rpm, rescaled.rpm, NOW).remaining).toBe(990);
    // A custom quota that fixes a dimension keeps it as it is.
    expect(rescaleBuckets(state, { ...from, rpm: 500 }, { ...to, rpm: 500 }, NOW).rpm).toBeUndefined();
  });
});

describe('header figures', () => {
  it('report the remaining units and the time until the bucket is full', () => {
    const { tat } = burst(30, 10);
    expect(statusOf('rpm', 30, tat, NOW)).toEqual({ limit: 30, remaining: 20, resetUs: 20_000_000 });
    expect(statusOf('rpm', 30, undefined, NOW)).toEqual({ limit: 30, remaining: 30, resetUs: 0 });
  });

  it('come from the tighter of the minute and day buckets, the one with fewer units left', () => {
    // A volume account allowed 1000 a minute but, by its tier, 300 a day, with 299 spent today at a steady pace.
    const limits = { rpm: 1000, rpd: 300, tpm: 2_000_000, tpd: 50_000_000 };
    const state = { rpm: NOW, rpd: NOW + 299 * emissionUs('rpd', 300), tpm: NOW, tpd: NOW };
    const headers = rateLimitHeaders(limits, state, NOW);
    expect(headers['x-ratelimit-limit-requests']).toBe('300');
    expect(headers['x-ratelimit-remaining-requests']).toBe('1');
    expect(headers['x-ratelimit-reset-requests']).toBe(formatDuration(299 * emissionUs('rpd', 300)));
    // Tokens: the day has more left than the minute, so the minute's figures stand.
    expect(headers['x-ratelimit-limit-tokens']).toBe('2000000');
    expect(headers['x-ratelimit-remaining-tokens']).toBe('2000000');
    // Fresh buckets: the minute's, which has fewer units to begin with.
    expect(rateLimitHeaders(TIER_LIMITS.trusted, {}, NOW)['x-ratelimit-limit-requests']).toBe('1000');
  });

  it('on a tie, come from the bucket that takes longer to reset: with both empty, that is when a call fits again', () => {
    // A quota of 30 a day on an account allowed 30 a minute, all 30 spent in a burst just now.
    const limits = { rpm: 30, rpd: 30, tpm: 100_000, tpd: 1_000_000 };
    const state = { rpm: NOW + 30 * emissionUs('rpm', 30), rpd: NOW + 30 * emissionUs('rpd', 30) };
    const headers = rateLimitHeaders(limits, state, NOW);
    expect(headers['x-ratelimit-remaining-requests']).toBe('0');
    expect(headers['x-ratelimit-reset-requests']).toBe(formatDuration(30 * emissionUs('rpd', 30)));
    expect(headers['x-ratelimit-reset-requests']).toBe('24h0m0s');
  });

  it('format durations as OpenAI does', () => {
    expect(formatDuration(0)).toBe('0s');
    expect(formatDuration(20_000)).toBe('20ms');
    expect(formatDuration(999_001)).toBe('1s');
    expect(formatDuration(1_500_000)).toBe('1.5s');
    expect(formatDuration(360_000_000)).toBe('6m0s');
    expect(formatDuration(3_723_000_000)).toBe('1h2m3s');
  });
});
