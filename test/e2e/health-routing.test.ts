import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sseEvents } from '#test/sse.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * Health-aware routing through the running stack: circuits open on an upstream's failures, traffic moves to
 * the other provider without client-visible errors, and the circuit half-opens and recovers after its
 * cool-down. The gateway's clock is ours, so the cool-down passes without waiting for it.
 */
let offsetMs = 0;
const clock = { now: () => performance.timeOrigin + performance.now() + offsetMs };
const COOLDOWN_MS = 20_000;
const FIRST_BYTE_TIMEOUT_MS = 1_500;

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack({
    clock,
    functionEnv: {
      HEALTH_MIN_CALLS: '4',
      HEALTH_FAILURE_RATE: '0.5',
      HEALTH_OVERLOAD_RUN: '3',
      HEALTH_FAILURE_RUN: '3',
      CIRCUIT_COOLDOWN_MS: String(COOLDOWN_MS),
      UPSTREAM_STREAM_FIRST_BYTE_TIMEOUT_MS: String(FIRST_BYTE_TIMEOUT_MS),
    },
  });
});
afterAll(() => t?.stop());
afterEach(() => {
  t.simulator.resetFaults();
  t.simulator.clearCalls();
});

const chat = (model: string, extra: Record<string, unknown> = {}) =>
  t.post('/chat/completions', { model, messages: [{ role: 'user', content: 'hello' }], ...extra });

const serve = async (model: string, n: number, extra: Record<string, unknown> = {}) => {
  const providers: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await chat(model, extra);
    expect(res.status).toBe(200);
    providers.push(res.headers.get('x-svc-provider') ?? '');
    await res.text();
  }
  return providers;
};

describe('a failing deployment', () => {
  it('opens its circuit; traffic moves to the other provider with no client errors and no more calls to it', async () => {
    const model = 'famB-5.3-flash';
    t.simulator.setFaults('sim-a', { error: 'server_error' });
    // Every call succeeds for the client (fallback); sim-a sees calls only until its circuit opens.
    expect(await serve(model, 4)).toEqual(['sim-b', 'sim-b', 'sim-b', 'sim-b']);
    const callsWhileFailing = t.simulator.calls('sim-a').length;
    expect(callsWhileFailing).toBeGreaterThan(0);
    t.simulator.clearCalls();
    expect(await serve(model, 5)).toEqual(['sim-b', 'sim-b', 'sim-b', 'sim-b', 'sim-b']);
    expect(t.simulator.calls('sim-a')).toHaveLength(0);
    // Attempts show no wasted try: the open circuit is skipped, not tried.
    const res = await chat(model);
    expect(res.headers.get('x-svc-attempts')).toBe('1');
    await res.text();
  });

  it('recovers after the cool-down: probed, then back to its priority', async () => {
    const model = 'famB-5.3-flash';
    // The previous test left sim-a's circuit open; sim-a is healthy again now, but not yet retried.
    expect(await serve(model, 2)).toEqual(['sim-b', 'sim-b']);
    expect(t.simulator.calls('sim-a')).toHaveLength(0);
    offsetMs += COOLDOWN_MS + 1;
    expect(await serve(model, 3)).toEqual(['sim-a', 'sim-a', 'sim-a']);
  });

  it('reopens with a longer cool-down when the probe fails', async () => {
    const model = 'famE-v2.6-pro';
    t.simulator.setFaults('sim-a', { error: 'server_error' });
    await serve(model, 4);
    offsetMs += COOLDOWN_MS + 1;
    t.simulator.clearCalls();
    // The probe goes to sim-a, fails, and the request falls back to sim-b.
    expect(await serve(model, 1)).toEqual(['sim-b']);
    expect(t.simulator.calls('sim-a').length).toBeGreaterThan(0);
    t.simulator.resetFaults();
    t.simulator.clearCalls();
    // One cool-down later it is still open: the second one is twice as long.
    offsetMs += COOLDOWN_MS + 1;
    expect(await serve(model, 2)).toEqual(['sim-b', 'sim-b']);
    expect(t.simulator.calls('sim-a')).toHaveLength(0);
    offsetMs += COOLDOWN_MS;
    expect(await serve(model, 2)).toEqual(['sim-a', 'sim-a']);
  });
});

describe('a bad key', () => {
  it('on a stream, is tried with the next key, then avoided: the stream is served and the circuit stays closed', async () => {
    const model = 'famB-5.3';
    // One of sim-a's two keys is refused (401) on every call.
    t.simulator.setFaults('sim-a', { error: 'unauthorized', keys: ['sim-a-key-1'] });
    const providers = await serve(model, 8, { stream: true });
    expect(providers.every((p) => p === 'sim-a')).toBe(true);
    expect(t.simulator.calls('sim-b')).toHaveLength(0);
    // Refused once (whichever call started on it first), then tried last: no stream spends a try on it again.
    const refused = t.simulator.calls('sim-a').filter((c) => c.key === 'sim-a-key-1');
    expect(refused.length).toBeLessThanOrEqual(1);
  });

  it('is the key’s fault, not the deployment’s: key cycling serves, and the circuit stays closed', async () => {
    const model = 'svc-pro-20b';
    // sim-a has two keys; one of them is refused with a server error on every call.
    t.simulator.setFaults('sim-a', { error: 'server_error', keys: ['sim-a-key-1'] });
    const badKeyHit = () =>
      t.simulator.calls('sim-a').some((c) => c.key === 'sim-a-key-1' && c.fault === 'server_error');
    const providers = await serve(model, 12);
    // Each call starts at a random key: call on until one has started at the bad key (12 misses in a row
    // happen 1 in 4,096 runs; 30 more, 1 in 2³⁰ of those).
    for (let more = 0; more < 30 && !badKeyHit(); more++) providers.push(...(await serve(model, 1)));
    expect(providers.every((p) => p === 'sim-a')).toBe(true);
    expect(t.simulator.calls('sim-b')).toHaveLength(0);
    // The bad key was hit, and cycling served anyway.
    expect(badKeyHit()).toBe(true);
  });
});

describe('streams', () => {
  it('fall back before their first byte, and stop trying the failing provider once its circuit opens', async () => {
    const model = 'famD-5-preview';
    t.simulator.setFaults('sim-a', { error: 'drop_before' });
    for (let i = 0; i < 6; i++) {
      const res = await chat(model, { stream: true });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-svc-provider')).toBe('sim-b');
      expect(sseEvents(await res.text()).at(-1)).toBe('[DONE]');
    }
    // Three failures in a row opened the circuit; the last three streams went straight to sim-b.
    expect(t.simulator.calls('sim-a')).toHaveLength(3);
  });

  it('that break mid-way count against the deployment that served them', async () => {
    const model = 'famG-4-argon';
    t.simulator.setFaults('sim-a', { error: 'drop_mid', dropAfterChunks: 2 });
    for (let i = 0; i < 3; i++) {
      const res = await chat(model, { stream: true });
      expect(res.headers.get('x-svc-provider')).toBe('sim-a');
      expect(sseEvents(await res.text())).not.toContain('[DONE]');
    }
    // The interrupted streams opened sim-a's circuit: the next stream is served whole by sim-b. (A call's
    // outcome reaches health after its response has ended; on Lambda the instance finishes that work before
    // its next invocation, here the next request must not overtake it.)
    await new Promise((resolve) => setTimeout(resolve, 50));
    const res = await chat(model, { stream: true });
    expect(res.headers.get('x-svc-provider')).toBe('sim-b');
    expect(sseEvents(await res.text()).at(-1)).toBe('[DONE]');
  });
});

describe('a hanging deployment', () => {
  it('leaves the line after three timeouts in a row, however far apart they came', async () => {
    const model = 'svc-pro-120b';
    // sim-a accepts the call and never begins its stream within the first-byte timeout.
    t.simulator.setFaults('sim-a', { firstByteDelayMs: FIRST_BYTE_TIMEOUT_MS * 4 });
    for (let i = 0; i < 3; i++) {
      // One such call a window: the failure rate over the window never has its minimum of calls.
      if (i > 0) offsetMs += 61_000;
      const res = await chat(model, { stream: true });
      expect(res.headers.get('x-svc-provider')).toBe('sim-b');
      await res.text();
    }
    t.simulator.clearCalls();
    const res = await chat(model, { stream: true });
    expect(res.headers.get('x-svc-provider')).toBe('sim-b');
    await res.text();
    // Served by sim-b without a try of sim-a: no first-byte timeout waited out.
    expect(t.simulator.calls('sim-a')).toHaveLength(0);
  }, 30_000);
});

describe('latency', () => {
  it('a long non-stream reply (a long answer asked for) does not make its deployment rank as slow against streams', async () => {
    const model = 'famF3.8-27b';
    // The primary serves six non-stream calls slowly, as it would a long generation.
    t.simulator.setFaults('sim-a', { latencyMs: 400 });
    expect(await serve(model, 6)).toEqual(Array(6).fill('sim-a'));
    // One stream falls back to the secondary, whose first event comes at once.
    t.simulator.setFaults('sim-a', { error: 'server_error', count: 1 });
    const stream = await chat(model, { stream: true });
    expect(stream.headers.get('x-svc-provider')).toBe('sim-b');
    await stream.text();
    t.simulator.resetFaults();
    offsetMs += 2_000; // past the median's refresh
    // A whole reply's 400 ms against a first event's few: not the deployment being slow. The primary keeps its
    // traffic (it was demoted to after the secondary when the two were compared).
    expect(await serve(model, 6)).toEqual(Array(6).fill('sim-a'));
  });
});

describe('exhaustion', () => {
  it('an all-overloaded model answers 429 engine_overloaded, then fails fast while circuits are open', async () => {
    const model = 'famH-nemotron-3.5-super-vl';
    t.simulator.setFaults('sim-a', { error: 'overloaded' });
    t.simulator.setFaults('sim-b', { error: 'overloaded' });
    for (let i = 0; i < 3; i++) {
      const res = await chat(model);
      expect(res.status).toBe(429);
      expect(await res.json()).toEqual({
        error: {
          message: expect.stringMatching(/busy|overloaded/i),
          type: 'invalid_request_error',
          param: null,
          code: 'engine_overloaded',
        },
      });
    }
    t.simulator.clearCalls();
    // Both circuits opened on overloads: still 429, without touching either upstream, and told to come back when
    // a circuit half-opens (the cool-down, 20 s here), not in 1 s, which would spend an SDK's retries in vain.
    const res = await chat(model);
    expect(res.status).toBe(429);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('engine_overloaded');
    expect(t.simulator.calls()).toHaveLength(0);
    const waitMs = Number(res.headers.get('retry-after-ms'));
    expect(waitMs).toBeGreaterThan(COOLDOWN_MS - 5_000);
    expect(waitMs).toBeLessThanOrEqual(COOLDOWN_MS);
    expect(res.headers.get('retry-after')).toBe(String(Math.ceil(waitMs / 1000)));
  });

  it('a model whose every circuit opened on failures answers 503 no_eligible_model', async () => {
    const model = 'famB-5.2';
    t.simulator.setFaults('sim-a', { error: 'server_error' });
    t.simulator.setFaults('sim-b', { error: 'server_error' });
    for (let i = 0; i < 4; i++) await (await chat(model)).text();
    t.simulator.clearCalls();
    const res = await chat(model);
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('no_eligible_model');
    expect(t.simulator.calls()).toHaveLength(0);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(10);
  });
});
