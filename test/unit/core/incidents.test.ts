import { describe, expect, it } from 'vitest';
import { DEFAULT_INCIDENT_RULE, detectIncidents, type MinuteCounts } from '#core/incidents.ts';

const T0 = Date.UTC(2026, 10, 22, 12, 0);
const MIN = 60_000;

/** A resolved incident down from minute `from` to minute `to` (after T0), every minute between down. */
const resolved = (name: string, severity: 'MINOR' | 'MAJOR', from: number, to: number) => ({
  name,
  severity,
  status: 'RESOLVED',
  start: T0 + from * MIN,
  end: T0 + to * MIN,
  downtimeMinutes: to - from,
});

/** Minute `i` after T0 with these counts. */
const minute = (i: number, requests: number, serverErrors = 0, noEligible = 0): MinuteCounts => ({
  at: T0 + i * MIN,
  requests,
  serverErrors,
  noEligible,
});

describe('detectIncidents', () => {
  it('finds nothing in healthy traffic, or in a few scattered faults', () => {
    expect(detectIncidents([minute(0, 100), minute(1, 80, 2), minute(30, 1, 1)], T0 + 60 * MIN)).toEqual([]);
  });

  it('opens an incident when 5xx reach half of the window’s calls, with at least three of them', () => {
    const [incident, ...rest] = detectIncidents([minute(10, 6, 4)], T0 + 40 * MIN);
    expect(rest).toEqual([]);
    expect(incident).toEqual(resolved('Elevated error rate: 67% of calls failed', 'MINOR', 10, 11));
  });

  it('measures the rate over the sliding window, so earlier healthy minutes dilute it', () => {
    // 4 errors among 6 calls, but 20 good calls three minutes before: 4/26 is under 50 %.
    expect(detectIncidents([minute(7, 20), minute(10, 6, 4)], T0 + 40 * MIN)).toEqual([]);
    // The same good calls five minutes before are outside the window.
    expect(detectIncidents([minute(5, 20), minute(10, 6, 4)], T0 + 40 * MIN)).toHaveLength(1);
  });

  it('needs at least minErrors 5xx in the window', () => {
    expect(detectIncidents([minute(0, 2, 2)], T0 + 40 * MIN)).toEqual([]);
    // Spread over the window they add up: the third error's minute is down, not the first two's.
    const [incident] = detectIncidents([minute(0, 1, 1), minute(1, 1, 1), minute(2, 1, 1)], T0 + 40 * MIN);
    expect(incident).toMatchObject({ start: T0 + 2 * MIN, downtimeMinutes: 1, severity: 'MAJOR' });
  });

  it('does not paint a healthy minute after an outage as down', () => {
    const incidents = detectIncidents([minute(0, 5, 5), minute(1, 5)], T0 + 40 * MIN);
    expect(incidents).toEqual([expect.objectContaining({ start: T0, end: T0 + MIN, downtimeMinutes: 1 })]);
  });

  it('makes any minute with a no-eligible-model 503 down, MAJOR, whatever the rate', () => {
    const [incident] = detectIncidents([minute(20, 100, 0, 1)], T0 + 40 * MIN);
    expect(incident).toEqual(resolved('Service unavailable: no eligible model (503)', 'MAJOR', 20, 21));
  });

  it('is MAJOR when every call of a minute failed', () => {
    expect(detectIncidents([minute(3, 4, 4)], T0 + 40 * MIN)[0]?.severity).toBe('MAJOR');
  });

  it('counts overloaded calls as failed ones for severity and the rate named, not as down-time alone', () => {
    const [incident] = detectIncidents([{ ...minute(3, 4, 3), overloaded: 1 }], T0 + 40 * MIN);
    expect(incident).toMatchObject({ severity: 'MAJOR', name: 'Elevated error rate: 100% of calls failed' });
    // Overload alone opens nothing: it is load, not an outage.
    expect(detectIncidents([{ ...minute(3, 4, 0), overloaded: 4 }], T0 + 40 * MIN)).toEqual([]);
  });

  it('judges the 5xx against the calls not turned away for load: a minute that served nothing is down', () => {
    // 4 upstream 500s and 6 all-busy 429s: nothing served. Against every call, 40 % — no outage.
    const [incident] = detectIncidents([{ ...minute(3, 10, 4), overloaded: 6 }], T0 + 40 * MIN);
    expect(incident).toMatchObject({ severity: 'MAJOR', name: 'Elevated error rate: 100% of calls failed' });
    // Still at least minErrors 5xx: two 500s among overloads are no outage.
    expect(detectIncidents([{ ...minute(3, 10, 2), overloaded: 8 }], T0 + 40 * MIN)).toEqual([]);
    // One busy model's 429s do not make a few broken streams elsewhere an outage: 3 of 400 served calls failed.
    expect(detectIncidents([{ ...minute(3, 1_000, 3), overloaded: 600 }], T0 + 40 * MIN)).toEqual([]);
  });

  it('merges down minutes less than mergeGapMinutes apart, counting only down minutes as downtime', () => {
    const incidents = detectIncidents(
      [minute(0, 3, 3), minute(1, 10), minute(2, 10), minute(4, 20, 20), minute(20, 1, 0, 1)],
      T0 + 60 * MIN,
    );
    expect(incidents.map((i) => [i.start, i.end, i.downtimeMinutes])).toEqual([
      [T0 + 20 * MIN, T0 + 21 * MIN, 1],
      [T0, T0 + 5 * MIN, 2],
    ]);
  });

  it('keeps down minutes mergeGapMinutes apart or more as separate incidents', () => {
    const gap = DEFAULT_INCIDENT_RULE.mergeGapMinutes;
    // Last down minute ends at T0+1; the next starts `gap` minutes later.
    const incidents = detectIncidents([minute(0, 1, 0, 1), minute(1 + gap, 1, 0, 1)], T0 + 60 * MIN);
    expect(incidents).toHaveLength(2);
  });

  it('is ONGOING until resolveAfterMinutes have passed since its last down minute', () => {
    const counts = [minute(20, 2, 0, 2), minute(21, 1, 0, 1)];
    const end = T0 + 22 * MIN;
    expect(detectIncidents(counts, end + 4 * MIN + 59_999)[0]?.status).toBe('ONGOING');
    expect(detectIncidents(counts, end + 5 * MIN)[0]?.status).toBe('RESOLVED');
    expect(detectIncidents(counts, end)[0]).toMatchObject({ downtimeMinutes: 2, start: T0 + 20 * MIN, end });
  });

  it('reads the minutes before `judgedFrom` for the sliding window only, never judging them', () => {
    const counts = [minute(0, 2, 2), minute(1, 2, 2), minute(2, 1, 1)];
    // Minutes 0 and 1 are down by the rule, but before the judged range: only minute 2 is judged, over all three.
    expect(detectIncidents(counts, T0 + 40 * MIN, DEFAULT_INCIDENT_RULE, T0 + 2 * MIN)).toEqual([
      expect.objectContaining({ start: T0 + 2 * MIN, end: T0 + 3 * MIN, downtimeMinutes: 1 }),
    ]);
    // Alone, minute 2's one 5xx is under the three the rule asks for.
    expect(detectIncidents([minute(2, 1, 1)], T0 + 40 * MIN)).toEqual([]);
  });

  it('adds up counts of the same minute (several shards) and ignores seconds within it', () => {
    const incidents = detectIncidents(
      [
        { at: T0 + 15_000, requests: 2, serverErrors: 2, noEligible: 0 },
        { at: T0 + 45_000, requests: 2, serverErrors: 1, noEligible: 0 },
      ],
      T0 + 60 * MIN,
    );
    expect(incidents).toEqual([
      expect.objectContaining({
        start: T0,
        downtimeMinutes: 1,
        name: 'Elevated error rate: 75% of calls failed',
      }),
    ]);
  });
});

describe('detectIncidents with the uptime probe’s failed checks', () => {
  const ALL = 0b11111;
  /** Minute `i` in which the probe's five checks ran and those of `failed` (a bit each) failed. */
  const probed = (i: number, failed: number, requests = 0, serverErrors = 0): MinuteCounts => ({
    ...minute(i, requests, serverErrors),
    probeChecks: 5,
    probeFailed: failed,
  });

  it('makes a platform that answers nothing down from the third round, MAJOR, with no call settled', () => {
    const [incident, ...rest] = detectIncidents(
      [probed(10, ALL), probed(11, ALL), probed(12, ALL), probed(13, ALL)],
      T0 + 40 * MIN,
    );
    expect(rest).toEqual([]);
    expect(incident).toEqual(resolved('Service unreachable: every uptime check failed', 'MAJOR', 12, 14));
  });

  it('takes a round or two lost to a blip for no outage', () => {
    expect(detectIncidents([probed(10, ALL)], T0 + 40 * MIN)).toEqual([]);
    expect(detectIncidents([probed(10, ALL), probed(12, ALL), probed(20, ALL)], T0 + 40 * MIN)).toEqual([]);
    // Different checks failing in different rounds are not one endpoint that keeps failing.
    expect(detectIncidents([probed(10, 0b1), probed(11, 0b10), probed(12, 0b100)], T0 + 40 * MIN)).toEqual(
      [],
    );
  });

  it('sees one endpoint that keeps failing as a partial outage, MINOR, however busy the others are', () => {
    // The chat preflight (bit 0) fails every round while 100 other calls a minute succeed.
    const busy = [10, 11, 12, 13].map((i) => probed(i, 0b1, 100));
    const [incident, ...rest] = detectIncidents(busy, T0 + 40 * MIN);
    expect(rest).toEqual([]);
    expect(incident).toEqual(
      resolved('Partial outage: an endpoint failed its uptime checks', 'MINOR', 12, 14),
    );
    // Three of five rounds are enough; they need not be in a row.
    expect(detectIncidents([probed(10, 0b1), probed(12, 0b1), probed(14, 0b1)], T0 + 40 * MIN)).toEqual([
      expect.objectContaining({ start: T0 + 14 * MIN, downtimeMinutes: 1, severity: 'MINOR' }),
    ]);
  });

  it('leaves the calls’ own rule as it was: checks neither dilute nor add to their rate', () => {
    // Three failed calls out of three in a quiet minute are down whether or not a check failed then.
    expect(detectIncidents([minute(10, 3, 3)], T0 + 40 * MIN)).toEqual([
      expect.objectContaining({ name: 'Elevated error rate: 100% of calls failed', severity: 'MAJOR' }),
    ]);
    expect(detectIncidents([probed(10, 0b1, 3, 3)], T0 + 40 * MIN)).toEqual([
      expect.objectContaining({ name: 'Elevated error rate: 100% of calls failed', severity: 'MAJOR' }),
    ]);
    // Two failed calls and a failed check are not the three failures the calls' rule asks for.
    expect(detectIncidents([probed(10, 0b1, 2, 2)], T0 + 40 * MIN)).toEqual([]);
  });

  it('names an incident the calls and the probe both saw by the calls, and rates it on their minutes only', () => {
    // Minute 12 is down on the calls (24 of 40 failed over the window); 13 and 14 only on the probe's check 0, beside
    // 1,000 good calls a minute that must not dilute the name's rate.
    const [incident] = detectIncidents(
      [
        probed(10, 0b1, 10, 2),
        probed(11, 0b1, 10, 2),
        probed(12, 0b1, 20, 20),
        probed(13, 0b1, 1000),
        probed(14, 0b1, 1000),
      ],
      T0 + 40 * MIN,
    );
    expect(incident).toMatchObject({
      name: 'Elevated error rate: 100% of calls failed',
      severity: 'MAJOR',
      start: T0 + 12 * MIN,
      downtimeMinutes: 3,
    });
  });

  it('takes no single round or call for proof that nothing could be served', () => {
    // Check 0 keeps failing; one blip round in minute 13 fails all five: still one endpoint, MINOR.
    expect(
      detectIncidents(
        [probed(10, 0b1), probed(11, 0b1), probed(12, 0b1), probed(13, ALL), probed(14, 0b1)],
        T0 + 40 * MIN,
      ),
    ).toEqual([
      expect.objectContaining({
        name: 'Partial outage: an endpoint failed its uptime checks',
        severity: 'MINOR',
      }),
    ]);
    // A minute down on the probe's word with its one call failed: the calls' rule did not find it down, MINOR.
    expect(detectIncidents([probed(10, 0b1), probed(11, 0b1), probed(12, 0b1, 1, 1)], T0 + 40 * MIN)).toEqual(
      [expect.objectContaining({ severity: 'MINOR' })],
    );
    // Calls failing at 60 % with one all-failed round among them: MINOR, as without it.
    const calls = [minute(10, 5, 3), { ...minute(11, 5, 3), probeChecks: 5, probeFailed: ALL }];
    expect(detectIncidents(calls, T0 + 40 * MIN)).toEqual([
      expect.objectContaining({ name: 'Elevated error rate: 60% of calls failed', severity: 'MINOR' }),
    ]);
  });

  it('makes a key store the probe cannot reach a MAJOR outage of its own', () => {
    // The key lookup (bit 4) answered 503: the store's bit (5, after the five checks) is set with it.
    const store = 0b110000;
    expect(detectIncidents([probed(10, store), probed(11, store), probed(12, store)], T0 + 40 * MIN)).toEqual(
      [
        expect.objectContaining({
          name: 'Service unavailable: the key store cannot be reached',
          severity: 'MAJOR',
          start: T0 + 12 * MIN,
        }),
      ],
    );
    // The models function failing otherwise (bit 4 alone) is one endpoint.
    expect(
      detectIncidents([probed(10, 0b10000), probed(11, 0b10000), probed(12, 0b10000)], T0 + 40 * MIN),
    ).toEqual([
      expect.objectContaining({
        name: 'Partial outage: an endpoint failed its uptime checks',
        severity: 'MINOR',
      }),
    ]);
  });

  it('merges the rows of one minute: the failed checks of both, the checks made', () => {
    const half = (failed: number): MinuteCounts => ({
      ...minute(10, 0),
      probeChecks: 5,
      probeFailed: failed,
    });
    // Two rows of each minute, checks 0–2 in one and 2–4 in the other: every check failed, three rounds running
    // (added, the masks would make check 2 a carry into the key store's bit).
    const rows = [10, 11, 12].flatMap((i) => [
      { ...half(0b00111), at: T0 + i * MIN },
      { ...half(0b11100), at: T0 + i * MIN + 1 },
    ]);
    expect(detectIncidents(rows, T0 + 40 * MIN)).toEqual([
      expect.objectContaining({ name: 'Service unreachable: every uptime check failed', severity: 'MAJOR' }),
    ]);
  });
});
