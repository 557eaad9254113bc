import { describe, expect, it } from 'vitest';
import { CallRecorder } from '#core/call-recorder.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import { HealthBoard } from '#core/health.ts';
import type { Warn } from '#core/ports.ts';
import {
  chatModel,
  deployment,
  manualAlarms,
  manualClock,
  TEST_HEALTH_POLICY,
  testGateway,
} from '#test/fixtures.ts';

const POLICY = TEST_HEALTH_POLICY;

/**
 * How a routed call reports a half-open probe back to deployment health: the gateway carries the probe's
 * token from routing to the attempt's outcome and to the call's end.
 */
/** A gateway routing on `health` alone: no keys, no admission, no catalog. */
const gatewayOn = (
  clock: ReturnType<typeof manualClock>,
  health?: HealthBoard,
  warn?: Warn,
  alarms = manualAlarms(),
) => testGateway({ clock, alarms, ...(health ? { health } : {}), ...(warn ? { warn } : {}) });

const setup = () => {
  const clock = manualClock();
  const health = new HealthBoard(POLICY, clock);
  const alarms = manualAlarms();
  const gateway = gatewayOn(clock, health, undefined, alarms);
  const resolved = {
    model: chatModel(),
    deployments: [deployment({ id: 'a', priority: 1 }), deployment({ id: 'b', priority: 2 })],
  };
  // 'a' opens on overloads and is half-open once the cool-down has passed.
  for (let i = 0; i < POLICY.overloadRun; i++) health.record('a', 'overloaded', 1);
  clock.advance(POLICY.cooldownMs);
  const call = () => new CallRecorder('chat.completions', 'req_test', clock);
  return { health, gateway, resolved, call, alarms };
};

/** A health board that also notes each verdict it is told, as `deployment:outcome:ms`. */
const recordingHealth = (clock: ReturnType<typeof manualClock>) => {
  const recorded: string[] = [];
  const health = new (class extends HealthBoard {
    override record(...args: Parameters<HealthBoard['record']>): void {
      recorded.push(`${args[0]}:${args[1]}:${args[2]}`);
      super.record(...args);
    }
  })(POLICY, clock);
  return { health, recorded };
};

describe('Gateway and half-open probes', () => {
  it("closes the circuit once the probe is answered (a stream's first event, a whole reply), counting it once", async () => {
    for (const stream of [true, false]) {
      const { health, gateway, resolved, call } = setup();
      const probing = call();
      probing.stream = stream;
      const served = await gateway.route(resolved, probing, !stream, async (d) => d.id);
      expect(served).toBe('a');
      // Closed while the answer still streams: a long one would otherwise outlive the probe (handed out again after
      // a cool-down) and its success settle nothing, keeping a recovered deployment out.
      expect(health.state('a')).toBe('closed');
      gateway.observeEnd(probing, 'ok');
      expect(health.state('a')).toBe('closed');
      expect(health.view('a')).toMatchObject({ calls: 1, failures: 0 });
    }
  });

  it('counts a probing stream that breaks mid-way as a failure of the closed circuit, not a second success', async () => {
    const { health, gateway, resolved, call } = setup();
    const probing = call();
    probing.stream = true;
    await gateway.route(resolved, probing, false, async (d) => d.id);
    gateway.observeEnd(probing, 'stream_interrupted');
    expect(health.view('a')).toMatchObject({ state: 'closed', calls: 2, failures: 1 });
  });

  it('reopens the circuit when the probe fails and the call falls back', async () => {
    const { health, gateway, resolved, call } = setup();
    const probing = call();
    const served = await gateway.route(resolved, probing, false, async (d) => {
      if (d.id === 'a') throw new UpstreamFailure('server_error', 'upstream status 500', { status: 500 });
      return d.id;
    });
    expect(served).toBe('b');
    gateway.observeEnd(probing, 'ok');
    expect(health.state('a')).toBe('open');
  });

  it('frees the probe when its call ends before the attempt does (the client went away)', async () => {
    const { health, gateway, resolved, call } = setup();
    const aborted = gateway.route(resolved, call(), false, async () => {
      throw Object.assign(new Error('client disconnected'), { name: 'AbortError' });
    });
    await expect(aborted).rejects.toThrow('client disconnected');
    // Without the release, the next probe would wait a whole cool-down for a verdict that never comes.
    expect(health.state('a')).toBe('half-open');
    expect(health.claimProbe('a')).not.toBeNull();
  });

  it("frees the probe when the call's deadline cuts its attempt: no verdict, no reopened circuit", async () => {
    const { health, gateway, resolved, call, alarms } = setup();
    const probing = call();
    probing.endBy = alarms.now() + 10;
    const cut = gateway.route(resolved, probing, true, (_d, _k, signal) => {
      return new Promise<never>((_, reject) =>
        signal.addEventListener('abort', () =>
          reject(Object.assign(new Error('aborted'), { name: 'AbortError' })),
        ),
      );
    });
    await Promise.resolve();
    alarms.advance(10);
    await expect(cut).rejects.toThrow('longest time a call may take');
    expect(probing.attempts).toMatchObject([{ deployment: 'a', outcome: 'timeout' }]);
    // Counted as a timeout, the failed probe would have reopened the circuit for a doubled cool-down.
    expect(health.state('a')).toBe('half-open');
    expect(health.claimProbe('a')).not.toBeNull();
  });

  it('does not let another call settle the probe: a straggler ending on the deployment changes nothing', async () => {
    const { health, gateway, resolved, call } = setup();
    const probing = call();
    let answer: (id: string) => void = () => {};
    const probe = gateway.route(
      resolved,
      probing,
      false,
      (d) => new Promise<string>((r) => (answer = () => r(d.id))),
    );
    // A second call, routed while the probe waits for its answer, skips 'a' …
    const other = call();
    expect(await gateway.route(resolved, other, false, async (d) => d.id)).toBe('b');
    // … and a call that had been served by 'a' before its circuit opened ends now, broken.
    const straggler = call();
    straggler.attempts.push({
      deployment: 'a',
      provider: 'p1',
      keyIndex: 0,
      outcome: 'ok',
      status: null,
      ms: 1,
      detail: null,
    });
    gateway.observeEnd(straggler, 'stream_interrupted');
    expect(health.state('a')).toBe('half-open');
    answer('a');
    expect(await probe).toBe('a');
    expect(health.state('a')).toBe('closed');
  });

  it("times a served call's latency only where it measures the deployment: streams and speech, not whole replies", async () => {
    for (const [endpoint, stream, timed] of [
      ['chat.completions', true, true],
      ['audio.speech', false, true],
      ['chat.completions', false, false],
      ['embeddings', false, false],
    ] as const) {
      const clock = manualClock();
      const health = new HealthBoard(POLICY, clock);
      const gateway = gatewayOn(clock, health);
      const served = new CallRecorder(endpoint, 'req_t', clock);
      served.stream = stream;
      await gateway.route(
        { model: chatModel(), deployments: [deployment({ id: 'a' })] },
        served,
        !stream,
        async () => {
          clock.advance(400);
          return 'ok';
        },
      );
      gateway.observeEnd(served, 'ok');
      clock.advance(2_000); // past the median's refresh
      expect(health.p50Ms('a'), `${endpoint} stream=${stream}`).toBe(timed ? 400 : null);
    }
  });
});

describe('Gateway and our own credentials', () => {
  it('warns the operator of each upstream refusal of our key, which the client never sees', async () => {
    const clock = manualClock();
    const warnings: [string, Readonly<Record<string, unknown>>][] = [];
    const gateway = gatewayOn(clock, undefined, (message, fields) => warnings.push([message, fields]));
    const resolved = {
      model: chatModel(),
      deployments: [deployment({ id: 'a', priority: 1 }), deployment({ id: 'b', priority: 2 })],
    };
    const served = await gateway.route(
      resolved,
      new CallRecorder('chat.completions', 'req_1', clock),
      true,
      async (d) => {
        if (d.id === 'a') throw new UpstreamFailure('auth', 'upstream status 401', { status: 401 });
        return d.id;
      },
    );
    expect(served).toBe('b');
    expect(warnings).toEqual([
      ['an upstream refused our key', { deployment: 'a', keyIndex: 0, status: 401 }],
    ]);

    // A key that could not be read (no status: nothing was sent) is said as the configuration fault it is.
    warnings.length = 0;
    await gateway.route(resolved, new CallRecorder('chat.completions', 'req_3', clock), true, async (d) => {
      if (d.id === 'a')
        throw new UpstreamFailure('auth', 'deployment a: upstream key unavailable: env:K is unset');
      return d.id;
    });
    expect(warnings).toEqual([
      [
        'an upstream key could not be read',
        { deployment: 'a', keyIndex: 0, detail: 'deployment a: upstream key unavailable: env:K is unset' },
      ],
    ]);

    // Other failures are the deployment's health's business, not a credentials warning.
    warnings.length = 0;
    await gateway.route(resolved, new CallRecorder('chat.completions', 'req_2', clock), true, async (d) => {
      if (d.id === 'a') throw new UpstreamFailure('server_error', 'upstream status 500', { status: 500 });
      return d.id;
    });
    expect(warnings).toEqual([]);
  });
});

describe('Gateway verdicts on deployments', () => {
  const keyed = {
    model: chatModel(),
    deployments: [
      deployment({ id: 'a', priority: 1, keyRefs: ['env:A1', 'env:A2'] }),
      deployment({ id: 'b', priority: 2 }),
    ],
  };

  it('counts one verdict per deployment per call, however many of its keys the call tried', async () => {
    const clock = manualClock();
    const health = new HealthBoard(POLICY, clock);
    const gateway = gatewayOn(clock, health);
    // Each call cycles a's two keys, every one busy: one busy verdict a call, not two (an overload run sooner).
    for (let i = 0; i < POLICY.overloadRun - 1; i++) {
      const served = await gateway.route(
        keyed,
        new CallRecorder('chat.completions', `r${i}`, clock),
        true,
        async (d) => {
          if (d.id === 'a') throw new UpstreamFailure('overloaded', 'busy', { status: 429 });
          return d.id;
        },
      );
      expect(served).toBe('b');
    }
    expect(health.state('a')).toBe('closed');
    expect(health.view('a')).toMatchObject({ calls: POLICY.overloadRun - 1, busy: POLICY.overloadRun - 1 });
  });

  it('keeps the verdict health counts over one it ignores, and the time of a non-stream failure out of it', async () => {
    const clock = manualClock();
    const { health, recorded } = recordingHealth(clock);
    const gateway = gatewayOn(clock, health);
    // a's first key fails with a 5xx, its second refuses the request itself: a 400 for the client, a 5xx for a.
    const refused = await gateway
      .route(keyed, new CallRecorder('chat.completions', 'r1', clock), true, async (_d, k) => {
        clock.advance(7);
        if (k === 0) throw new UpstreamFailure('server_error', 'broken', { status: 500 });
        throw new UpstreamFailure('rejected', 'bad request', { status: 400 });
      })
      .catch((error: unknown) => error);
    expect(refused).toMatchObject({ status: 400 });
    // A non-stream call: the failure's time is a whole reply's, not the deployment's speed.
    expect(recorded).toEqual(['a:server_error:null']);
    recorded.length = 0;
    const stream = new CallRecorder('chat.completions', 'r2', clock);
    stream.stream = true;
    await gateway.route(keyed, stream, false, async (d) => {
      clock.advance(7);
      if (d.id === 'a') throw new UpstreamFailure('timeout', 'no first byte', {});
      return d.id;
    });
    expect(recorded).toEqual(['a:timeout:7']);
  });

  it("keeps the time of a stream made from a whole reply out of its deployment's latency, not the others' failures", async () => {
    const clock = manualClock();
    const { health, recorded } = recordingHealth(clock);
    const gateway = gatewayOn(clock, health);
    const timeAll = async (wholeFrom: readonly string[]) => {
      recorded.length = 0;
      const call = new CallRecorder('chat.completions', 'r', clock);
      call.stream = true;
      await gateway.route(keyed, call, false, async (d) => {
        clock.advance(7);
        // What the chat handler notes of an attempt made for, or answered with, a whole reply.
        if (wholeFrom.includes(d.id)) call.wholeReplyFrom(d.id);
        if (d.id === 'a') throw new UpstreamFailure('timeout', 'no reply', {});
        return d.id;
      });
      gateway.observeEnd(call, 'ok');
      return [...recorded];
    };
    // b's whole reply took 7 ms of generation; a's first-byte timeout still counts with its time.
    expect(await timeAll(['b'])).toEqual(['a:timeout:7', 'b:ok:null']);
    // a, asked for a whole reply, timed out as a non-stream call would: its time is no first byte's either.
    expect(await timeAll(['a'])).toEqual(['a:timeout:null', 'b:ok:7']);
    expect(await timeAll([])).toEqual(['a:timeout:7', 'b:ok:7']);
  });

  it('tries the deployments a stream would get a whole reply from after those that stream', async () => {
    const gateway = gatewayOn(manualClock());
    const tried: string[] = [];
    const route = (lastly?: (d: { id: string }) => boolean) =>
      gateway.route(
        keyed,
        new CallRecorder('chat.completions', 'r', manualClock()),
        false,
        async (d) => {
          tried.push(d.id);
          throw new UpstreamFailure('server_error', 'down', { status: 500 });
        },
        undefined,
        lastly,
      );
    await expect(route((d) => d.id === 'a')).rejects.toMatchObject({ status: 500 });
    expect(tried).toEqual(['b', 'a']);
    tried.length = 0;
    await expect(route()).rejects.toMatchObject({ status: 500 });
    expect(tried).toEqual(['a', 'b']);
  });

  it('routes the next calls past a refused key: the instance tries it last for a while', async () => {
    const clock = manualClock();
    const health = new HealthBoard(POLICY, clock);
    const gateway = gatewayOn(clock, health);
    const keysTried: number[] = [];
    const refuseKey0 = async (d: { id: string }, keyIndex: number) => {
      keysTried.push(keyIndex);
      if (keyIndex === 0) throw new UpstreamFailure('auth', 'refused', { status: 401 });
      return d.id;
    };
    // A stream (no key cycling on the deployment's faults) starting on the bad key moves to the next key of a.
    const first = new CallRecorder('chat.completions', 'r1', clock);
    expect(await gateway.route(keyed, first, false, refuseKey0)).toBe('a');
    expect(keysTried).toEqual([0, 1]);
    keysTried.length = 0;
    // Later calls start elsewhere, whatever their random start (testGateway's is 0): key 0 only last.
    for (let i = 0; i < 3; i++)
      await gateway.route(keyed, new CallRecorder('chat.completions', `r${i + 2}`, clock), false, refuseKey0);
    expect(keysTried).toEqual([1, 1, 1]);
    expect(health.state('a')).toBe('closed');
  });
});
