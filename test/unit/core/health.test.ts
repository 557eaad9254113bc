import { describe, expect, it } from 'vitest';
import { EngineOverloadedError, ServiceUnavailableError } from '#core/errors.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import { HealthBoard } from '#core/health.ts';
import { planRoute } from '#core/routing.ts';
import { deployment, TEST_HEALTH_POLICY } from '#test/fixtures.ts';

const POLICY = TEST_HEALTH_POLICY;

const setup = () => {
  let now = 1_000_000;
  const board = new HealthBoard(POLICY, { now: () => now });
  /** Three overloads: enough calls, all failed — the circuit opens. */
  const trip = () => {
    for (let i = 0; i < 3; i++) board.record('a', 'overloaded', 1);
  };
  return { board, advance: (ms: number) => (now += ms), trip };
};

describe('HealthBoard circuit', () => {
  it('says when a request may next try: the rest of the cool-down, then a moment while another request probes', () => {
    const { board, advance, trip } = setup();
    expect(board.reopensInMs('a')).toBe(0);
    trip();
    expect(board.reopensInMs('a')).toBe(POLICY.cooldownMs);
    advance(POLICY.cooldownMs - 100);
    expect(board.reopensInMs('a')).toBe(100);
    advance(100);
    expect(board.reopensInMs('a')).toBe(0); // half-open: the next request probes
    expect(board.claimProbe('a')).not.toBeNull();
    // The probe settles within an upstream timeout: not a whole cool-down (minutes after failed probes).
    expect(board.reopensInMs('a')).toBeGreaterThan(0);
    expect(board.reopensInMs('a')).toBeLessThanOrEqual(2_000);
  });

  it('stays closed below the failure rate and the failure run, whatever the failures were', () => {
    const { board } = setup();
    for (let i = 0; i < 3; i++) board.record('a', 'ok', 5);
    board.record('a', 'server_error', 5);
    board.record('a', 'timeout', 5);
    expect(board.state('a')).toBe('closed'); // 2 of 5, and 2 in a row
  });

  it('opens after a run of failures however far apart they came, as a hanging deployment makes them', () => {
    const { board, advance } = setup();
    // One stream a window, each waiting out its first-byte timeout: never minCalls within the window.
    for (let i = 0; i < POLICY.failureRun - 1; i++) {
      board.record('a', 'timeout', 30_000);
      advance(POLICY.windowMs + 1);
    }
    expect(board.state('a')).toBe('closed');
    board.record('a', 'connect', 30_000);
    expect(board.state('a')).toBe('open');
    expect(board.reason('a')).toBe('failing');
  });

  it("does not take a non-stream call's timeouts for a hang: its time is the answer's, which the client decides", () => {
    const { board, advance } = setup();
    // Spread out, as one instance's long non-stream calls come (the window's rule still counts them close together).
    for (let i = 0; i < POLICY.failureRun + 2; i++) {
      board.record('a', 'timeout', null);
      advance(POLICY.windowMs + 1);
    }
    expect(board.state('a')).toBe('closed');
    // Nor do they break a run of failures that speak of the deployment.
    board.record('b', 'connect', 5);
    board.record('b', 'timeout', null);
    board.record('b', 'connect', 5);
    board.record('b', 'timeout', 30_000);
    expect(board.state('b')).toBe('open');
  });

  it('restarts the failure run at a success', () => {
    const { board } = setup();
    for (let i = 0; i < 4; i++) board.record('a', 'ok', 5); // keeps the failure rate under the threshold
    for (let i = 0; i < POLICY.failureRun - 1; i++) board.record('a', 'timeout', 30_000);
    board.record('a', 'ok', 5);
    for (let i = 0; i < POLICY.failureRun - 1; i++) board.record('a', 'timeout', 30_000);
    expect(board.state('a')).toBe('closed');
  });

  it('opens at the failure rate over the window, and only counts calls inside the window', () => {
    const { board, advance } = setup();
    board.record('a', 'server_error', 5);
    board.record('a', 'server_error', 5);
    advance(POLICY.windowMs + 1); // those two age out
    board.record('a', 'ok', 5);
    board.record('a', 'ok', 5);
    board.record('a', 'server_error', 5);
    expect(board.state('a')).toBe('closed'); // 1 of 3 in the window
    board.record('a', 'server_error', 5);
    expect(board.state('a')).toBe('open'); // 2 of 4
    expect(board.reason('a')).toBe('failing');
  });

  it('opens after a run of overloads, which any other outcome breaks', () => {
    const { board } = setup();
    for (let i = 0; i < 4; i++) board.record('a', 'ok', 1); // keeps the failure rate under the threshold
    board.record('a', 'overloaded', 1);
    board.record('a', 'overloaded', 1);
    board.record('a', 'ok', 1);
    board.record('a', 'overloaded', 1);
    board.record('a', 'overloaded', 1);
    expect(board.state('a')).toBe('closed');
    board.record('a', 'overloaded', 1);
    expect(board.state('a')).toBe('open');
    expect(board.reason('a')).toBe('overloaded');
  });

  it('calls a circuit opened by busy answers alone overloaded, even without a run (interleaved, rate limits)', () => {
    const { board } = setup();
    for (const outcome of ['overloaded', 'ok', 'rate_limited', 'overloaded'] as const)
      board.record('a', outcome, 1);
    expect(board.state('a')).toBe('open'); // 3 of 4 failed
    expect(board.reason('a')).toBe('overloaded');
    const other = setup().board;
    for (let i = 0; i < 3; i++) other.record('b', 'rate_limited', 1);
    expect(other.reason('b')).toBe('overloaded');
  });

  it('ignores rejected requests: a 400 from upstream says nothing about its health', () => {
    const { board } = setup();
    for (let i = 0; i < 10; i++) board.record('a', 'rejected', 1);
    for (let i = 0; i < 10; i++) board.record('a', 'unsupported', 1);
    expect(board.view('a')).toMatchObject({ state: 'closed', calls: 0 });
  });

  it('half-opens after the cool-down with one probe at a time; a good probe closes it', () => {
    const { board, advance, trip } = setup();
    trip();
    advance(POLICY.cooldownMs - 1);
    expect(board.state('a')).toBe('open');
    expect(board.claimProbe('a')).toBeNull();
    advance(1);
    expect(board.state('a')).toBe('half-open');
    const probe = board.claimProbe('a');
    expect(probe).not.toBeNull();
    expect(board.claimProbe('a')).toBeNull(); // one in flight
    board.record('a', 'ok', 3, probe);
    expect(board.state('a')).toBe('closed');
    expect(board.view('a').failures).toBe(0); // a fresh window
  });

  it('doubles the cool-down when a probe fails, up to the maximum', () => {
    const { board, advance, trip } = setup();
    trip();
    const cooldowns: number[] = [];
    for (let round = 0; round < 4; round++) {
      let waited = 0;
      while (board.state('a') !== 'half-open') {
        advance(1000);
        waited += 1000;
      }
      cooldowns.push(waited);
      const probe = board.claimProbe('a');
      expect(probe).not.toBeNull();
      board.record('a', 'server_error', 1, probe);
    }
    expect(cooldowns).toEqual([10_000, 20_000, 40_000, 40_000]);
  });

  it('gives up on a probe that never reported back after a cool-down, so one lost request cannot wedge it', () => {
    const { board, advance, trip } = setup();
    trip();
    advance(POLICY.cooldownMs);
    const lost = board.claimProbe('a');
    expect(lost).not.toBeNull();
    advance(POLICY.cooldownMs - 1);
    expect(board.claimProbe('a')).toBeNull();
    advance(1);
    const next = board.claimProbe('a');
    expect(next).not.toBeNull();
    // The lost probe's late word settles nothing: the circuit waits for its successor's.
    board.record('a', 'ok', 1, lost);
    expect(board.state('a')).toBe('half-open');
    board.record('a', 'ok', 1, next);
    expect(board.state('a')).toBe('closed');
  });

  it('lets only the probe settle a half-open circuit: stragglers from before it opened change nothing', () => {
    const { board, advance, trip } = setup();
    trip();
    advance(POLICY.cooldownMs);
    const probe = board.claimProbe('a');
    // A stream that started before the circuit opened ends now, well or badly: not the probe's verdict.
    board.record('a', 'ok', 1);
    board.record('a', 'dropped', 1);
    expect(board.state('a')).toBe('half-open');
    expect(board.claimProbe('a')).toBeNull(); // the probe is still out
    board.record('a', 'server_error', 1, probe);
    expect(board.state('a')).toBe('open');
    advance(POLICY.cooldownMs * 2 - 1); // a failed probe doubled the cool-down
    expect(board.state('a')).toBe('open');
  });

  it('frees the probe for the next request when it says nothing about the upstream, or never ran', () => {
    const { board, advance, trip } = setup();
    trip();
    advance(POLICY.cooldownMs);
    const refused = board.claimProbe('a');
    board.record('a', 'rejected', 1, refused); // the request itself was refused (a 400 upstream)
    expect(board.state('a')).toBe('half-open'); // no verdict, cool-down unchanged
    const gone = board.claimProbe('a');
    expect(gone).not.toBeNull();
    board.release('a', gone as number); // the client left before the attempt ended
    const third = board.claimProbe('a');
    expect(third).not.toBeNull();
    board.release('a', gone as number); // a stale release does not free the current probe
    expect(board.claimProbe('a')).toBeNull();
    board.record('a', 'ok', 1, third);
    expect(board.state('a')).toBe('closed');
  });

  it('marks a closed deployment degraded when it fails a fifth of its calls or is much slower', () => {
    const { board } = setup();
    for (let i = 0; i < 4; i++) board.record('a', 'ok', 10);
    board.record('a', 'server_error', 10);
    expect(board.degraded('a', 10)).toBe(true);
    for (let i = 0; i < 5; i++) board.record('slow', 'ok', 900);
    expect(board.degraded('slow', 100)).toBe(true); // 9× and +800 ms
    for (let i = 0; i < 5; i++) board.record('near', 'ok', 9);
    expect(board.degraded('near', 2)).toBe(false); // 4.5× but only +7 ms: loopback noise
  });
});

describe('planRoute with health', () => {
  const a = deployment({ id: 'a', priority: 1 });
  const b = deployment({ id: 'b', priority: 2 });
  const c = deployment({ id: 'c', priority: 3 });

  it('skips open circuits and keeps priority among the rest', () => {
    const { board, trip } = setup();
    trip();
    expect(planRoute([a, b, c], Math.random, board).deployments.map((d) => d.id)).toEqual(['b', 'c']);
  });

  it('tries a half-open deployment first, as its probe, and only one request gets it', () => {
    const { board, advance } = setup();
    for (let i = 0; i < 3; i++) board.record('b', 'overloaded', 1);
    advance(POLICY.cooldownMs);
    const probing = planRoute([a, b, c], Math.random, board);
    expect(probing.deployments.map((d) => d.id)).toEqual(['b', 'a', 'c']);
    expect([...probing.probes.keys()]).toEqual(['b']);
    const next = planRoute([a, b, c], Math.random, board);
    expect(next.deployments.map((d) => d.id)).toEqual(['a', 'c']);
    expect(next.probes.size).toBe(0);
    board.record('b', 'ok', 1, probing.probes.get('b'));
    expect(board.state('b')).toBe('closed');
  });

  it('puts degraded deployments after healthy ones of any priority', () => {
    const { board } = setup();
    for (let i = 0; i < 4; i++) board.record('a', 'ok', 10);
    board.record('a', 'server_error', 10);
    expect(planRoute([a, b, c], Math.random, board).deployments.map((d) => d.id)).toEqual(['b', 'c', 'a']);
  });

  it('measures "slow" against deployments still routed to, not one whose circuit opened', () => {
    const { board } = setup();
    // a was fast until its circuit opened; its median stays in the window.
    for (let i = 0; i < 5; i++) board.record('a', 'ok', 10);
    for (let i = 0; i < 3; i++) board.record('a', 'overloaded', 10);
    expect(board.state('a')).toBe('open');
    // b answers in 900 ms: 90 times a's old median, but the fastest of what is left.
    for (let i = 0; i < 5; i++) board.record('b', 'ok', 900);
    expect(planRoute([a, b, c], Math.random, board).deployments.map((d) => d.id)).toEqual(['b', 'c']);
  });

  it('throws 429 engine_overloaded when every circuit opened on overloads, else 503', () => {
    const { board } = setup();
    for (const id of ['a', 'b']) for (let i = 0; i < 3; i++) board.record(id, 'overloaded', 1);
    expect(() => planRoute([a, b], Math.random, board)).toThrow(EngineOverloadedError);
    for (let i = 0; i < 4; i++) board.record('c', 'server_error', 1);
    expect(() => planRoute([a, b, c], Math.random, board)).toThrow(ServiceUnavailableError);
  });
});

describe('HealthBoard key memory', () => {
  const failure = (kind: 'auth' | 'rate_limited', retryAfterMs: number | null = null) =>
    new UpstreamFailure(kind, kind, { status: kind === 'auth' ? 401 : 429, retryAfterMs });

  it('shuns a refused key for a minute, and a spent one for its Retry-After (a second by default, a minute at most)', () => {
    const { board, advance } = setup();
    board.failed('a', 0, failure('auth'));
    board.failed('a', 1, failure('rate_limited', 5_000));
    board.failed('a', 2, failure('rate_limited'));
    board.failed('a', 3, failure('rate_limited', 3_600_000));
    expect([0, 1, 2, 3, 4].map((k) => board.shunned('a', k))).toEqual([true, true, true, true, false]);
    expect(board.shunned('b', 0)).toBe(false);
    advance(1_000);
    expect([0, 1, 2, 3].map((k) => board.shunned('a', k))).toEqual([true, true, false, true]);
    advance(4_000);
    expect([0, 1, 3].map((k) => board.shunned('a', k))).toEqual([true, false, true]);
    advance(55_000);
    expect([0, 3].map((k) => board.shunned('a', k))).toEqual([false, false]);
  });
});
