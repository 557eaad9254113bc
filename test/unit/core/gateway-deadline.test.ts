import { describe, expect, it } from 'vitest';
import { CallRecorder } from '#core/call-recorder.ts';
import { DeadlineError } from '#core/errors.ts';
import type { Deployment } from '#core/registry.ts';
import { chatModel, deployment, manualAlarms, manualClock, testGateway } from '#test/fixtures.ts';

/**
 * A call's route stops at its deadline: the function's end (`endBy`), or sooner when what is in front of the
 * function stops waiting for the response to begin (`firstByteBy`). Both are wall-clock times, kept on the
 * Alarms port, so these run on a manual one.
 */
const setup = () => {
  const alarms = manualAlarms();
  const clock = manualClock();
  const gateway = testGateway({ clock, alarms });
  const resolved = { model: chatModel(), deployments: [deployment({ id: 'a' }), deployment({ id: 'b' })] };
  const call = new CallRecorder('chat.completions', 'req_deadline', clock);
  const tried: string[] = [];
  /** An attempt that waits for its upstream until the route's signal cuts it. */
  const hanging = (d: Deployment, _key: number, signal: AbortSignal) => {
    tried.push(d.id);
    return new Promise<string>((_, reject) =>
      signal.addEventListener('abort', () => reject(new Error('cut')), { once: true }),
    );
  };
  return { alarms, gateway, resolved, call, tried, hanging };
};

describe('Gateway.route and the call’s deadline', () => {
  it('makes no attempt at all when the deadline has already passed', async () => {
    const { alarms, gateway, resolved, call, tried, hanging } = setup();
    call.endBy = alarms.now() - 1;
    await expect(gateway.route(resolved, call, true, hanging)).rejects.toBeInstanceOf(DeadlineError);
    expect(tried).toEqual([]);
    expect(alarms.pending).toBe(0);
  });

  it('cuts a hanging attempt when the function’s end comes, and tries no other deployment', async () => {
    const { alarms, gateway, resolved, call, tried, hanging } = setup();
    call.endBy = alarms.now() + 5_000;
    const routed = gateway.route(resolved, call, true, hanging).catch((error: unknown) => error);
    await Promise.resolve();
    alarms.advance(4_999);
    expect(tried).toEqual(['a']); // still waiting
    alarms.advance(1);
    const error = await routed;
    expect(error).toBeInstanceOf(DeadlineError);
    expect((error as Error).message).toMatch(/longest time a call may take/);
    expect(tried).toEqual(['a']);
    expect(call.attempts).toMatchObject([{ deployment: 'a', outcome: 'timeout' }]);
  });

  it('stops at the first-byte limit when it comes first, telling the client to stream long calls', async () => {
    const { alarms, gateway, resolved, call, hanging } = setup();
    call.endBy = alarms.now() + 60_000;
    call.firstByteBy = alarms.now() + 30_000;
    const routed = gateway.route(resolved, call, true, hanging).catch((error: unknown) => error);
    await Promise.resolve();
    alarms.advance(30_000);
    expect(((await routed) as Error).message).toMatch(/set "stream": true/);
  });

  it('does not tell a stream to stream: its providers were only slow to begin', async () => {
    const { alarms, gateway, resolved, call, hanging } = setup();
    call.stream = true;
    call.endBy = alarms.now() + 60_000;
    call.firstByteBy = alarms.now() + 30_000;
    const routed = gateway.route(resolved, call, false, hanging).catch((error: unknown) => error);
    await Promise.resolve();
    alarms.advance(30_000);
    const message = ((await routed) as Error).message;
    expect(message).not.toMatch(/"stream": true/);
    expect(message).toMatch(/Please retry/);
  });

  it.each([
    ['embeddings', 'Please retry, or send fewer inputs per call.'],
    ['audio.transcriptions', 'Please retry, or send a shorter recording.'],
    ['audio.speech', 'Please retry.'],
  ] as const)('tells a %s call what it can do: it has no "stream" to set', async (endpoint, advice) => {
    const { alarms, gateway, resolved, hanging } = setup();
    const call = new CallRecorder(endpoint, 'req_deadline', alarms);
    call.endBy = alarms.now() + 60_000;
    call.firstByteBy = alarms.now() + 30_000;
    const routed = gateway.route(resolved, call, true, hanging).catch((error: unknown) => error);
    await Promise.resolve();
    alarms.advance(30_000);
    const message = ((await routed) as Error).message;
    expect(message).not.toMatch(/"stream"/);
    expect(message.endsWith(advice)).toBe(true);
  });

  it('disarms the alarm once the route is served', async () => {
    const { alarms, gateway, resolved, call } = setup();
    call.endBy = alarms.now() + 5_000;
    await expect(gateway.route(resolved, call, true, async (d) => d.id)).resolves.toBe('a');
    expect(alarms.pending).toBe(0);
  });
});
