import { describe, expect, it } from 'vitest';
import { EngineOverloadedError, InvalidRequestError, UpstreamFaultError } from '#core/errors.ts';
import {
  type Attempt,
  abandoned,
  countUpstreamCalls,
  type FailureKind,
  type KeyMemory,
  RouteCancelled,
  UpstreamFailure,
  withFallback,
} from '#core/fallback.ts';
import type { Deployment } from '#core/registry.ts';
import { deployment, manualClock } from '#test/fixtures.ts';

const a = deployment({ id: 'a', provider: 'pa', keyRefs: ['env:A1', 'env:A2', 'env:A3'] });
const b = deployment({ id: 'b', provider: 'pb', keyRefs: ['env:B1'] });

/** The status each failure comes with here (`unsupported`: none, the protocol could not express the request). */
const STATUS: Partial<Record<FailureKind, number | undefined>> = {
  overloaded: 429,
  rate_limited: 429,
  auth: 401,
  rejected: 400,
  unsupported: undefined,
  connect: undefined,
};

/** Runs withFallback where `script` says how each (deployment, key) call ends. */
const run = async (
  script: (d: Deployment, keyIndex: number) => FailureKind | 'ok',
  options: {
    cycleKeys?: boolean;
    maxAttempts?: number;
    random?: () => number;
    plan?: readonly Deployment[];
    keys?: KeyMemory;
  } = {},
) => {
  const attempts: Attempt[] = [];
  const calls: string[] = [];
  const result = await withFallback(
    options.plan ?? [a, b],
    {
      cycleKeys: options.cycleKeys ?? true,
      maxAttempts: options.maxAttempts ?? 10,
      clock: manualClock(),
      random: options.random ?? (() => 0),
      attempts,
      ...(options.keys ? { keys: options.keys } : {}),
    },
    async (d, keyIndex) => {
      calls.push(`${d.id}#${keyIndex}`);
      const outcome = script(d, keyIndex);
      if (outcome === 'ok') return `${d.id}#${keyIndex}`;
      const status = outcome in STATUS ? STATUS[outcome] : 500;
      throw new UpstreamFailure(outcome, outcome, status === undefined ? {} : { status });
    },
  ).catch((error: unknown) => error);
  return { result, calls, attempts };
};

describe('withFallback', () => {
  it('serves from the first deployment when it answers', async () => {
    const { result, calls } = await run(() => 'ok');
    expect(result).toMatchObject({ value: 'a#0', deployment: a });
    expect(calls).toEqual(['a#0']);
  });

  it('cycles the deployment keys on upstream faults before falling back (non-stream)', async () => {
    const { result, calls, attempts } = await run((d, k) => (d.id === 'a' && k < 2 ? 'server_error' : 'ok'));
    expect(calls).toEqual(['a#0', 'a#1', 'a#2']);
    expect(result).toMatchObject({ value: 'a#2' });
    expect(attempts.map((x) => x.outcome)).toEqual(['server_error', 'server_error', 'ok']);
  });

  it('starts on a random key and wraps around', async () => {
    const { calls } = await run((d) => (d.id === 'a' ? 'rate_limited' : 'ok'), { random: () => 0.5 });
    expect(calls).toEqual(['a#1', 'a#2', 'a#0', 'b#0']);
  });

  it('moves to the next deployment at once on transport failures: keys cannot help', async () => {
    const { calls, result } = await run((d) => (d.id === 'a' ? 'connect' : 'ok'));
    expect(calls).toEqual(['a#0', 'b#0']);
    expect(result).toMatchObject({ deployment: b });
  });

  it("does not cycle keys on the deployment's faults when told not to (streams)", async () => {
    for (const fault of ['server_error', 'overloaded'] as const) {
      const { calls } = await run((d) => (d.id === 'a' ? fault : 'ok'), { cycleKeys: false });
      expect(calls).toEqual(['a#0', 'b#0']);
    }
  });

  it('tries the next key on a fault of the key alone, streams too: refused, or its own quota spent', async () => {
    for (const fault of ['auth', 'rate_limited'] as const) {
      const { calls, result } = await run((d, k) => (d.id === 'a' && k === 0 ? fault : 'ok'), {
        cycleKeys: false,
      });
      expect(calls).toEqual(['a#0', 'a#1']);
      expect(result).toMatchObject({ deployment: a, value: 'a#1' });
    }
  });

  it('spends at most one more key of a deployment on a stream, and none it knows to fail, before the next deployment', async () => {
    const c = deployment({ id: 'c', provider: 'pc', keyRefs: ['env:C1'] });
    const shunned = new Set<string>();
    const keys: KeyMemory = {
      shunned: (d, k) => shunned.has(`${d}#${k}`),
      failed: (d, k) => shunned.add(`${d}#${k}`),
    };
    // Every key of a shares one spent quota.
    const stream = () =>
      run((d) => (d.id === 'a' ? 'rate_limited' : 'ok'), {
        cycleKeys: false,
        maxAttempts: 3,
        plan: [a, c],
        keys,
      });
    // Three attempts allowed: two of a's keys, then c — not a's third key and a 429.
    expect(await stream()).toMatchObject({ calls: ['a#0', 'a#1', 'c#0'], result: { value: 'c#0' } });
    // Next call: a's one fresh key, and no more of a's.
    expect(await stream()).toMatchObject({ calls: ['a#2', 'c#0'], result: { value: 'c#0' } });
    // All of a's keys shunned: one try of a (it may have come back), then c.
    expect(await stream()).toMatchObject({ calls: ['a#0', 'c#0'], result: { value: 'c#0' } });
  });

  it('starts on keys the instance does not shun, and tells it of keys that failed on their own', async () => {
    const failed: string[] = [];
    const shunned = new Set(['a#0', 'a#1']);
    const { calls, result } = await run(
      (d, k) => (d.id === 'a' && k === 2 ? 'auth' : d.id === 'a' && k === 0 ? 'server_error' : 'ok'),
      {
        keys: {
          shunned: (d, k) => shunned.has(`${d}#${k}`),
          failed: (d, k, failure) => failed.push(`${d}#${k}:${failure.kind}`),
        },
      },
    );
    // The shunned keys come last, in their turn; a 5xx is the deployment's, not remembered against the key.
    expect(calls).toEqual(['a#2', 'a#0', 'a#1']);
    expect(result).toMatchObject({ value: 'a#1' });
    expect(failed).toEqual(['a#2:auth']);
  });

  it('answers 429 engine_overloaded when every attempt was busy', async () => {
    const { result } = await run(() => 'overloaded');
    expect(result).toBeInstanceOf(EngineOverloadedError);
    expect(result).toMatchObject({ status: 429, code: 'engine_overloaded' });
  });

  it('tells the client to retry when the soonest busy deployment said it would take calls, within a minute', async () => {
    const busyAfter = async (hints: Record<string, number | null>) => {
      const result = await withFallback(
        [a, b],
        { cycleKeys: false, maxAttempts: 10, clock: manualClock(), random: () => 0, attempts: [] },
        async (d) => {
          throw new UpstreamFailure('rate_limited', 'busy', {
            status: 429,
            retryAfterMs: hints[d.id] ?? null,
          });
        },
      ).catch((error: unknown) => error);
      expect(result).toBeInstanceOf(EngineOverloadedError);
      return (result as EngineOverloadedError).headers;
    };
    expect(await busyAfter({ a: 7_000, b: 2_500 })).toEqual({ 'retry-after': '3', 'retry-after-ms': '2500' });
    // One said nothing: it may be free in a second, as SDKs' own backoff assumes.
    expect(await busyAfter({ a: 7_000, b: null })).toEqual({ 'retry-after': '1', 'retry-after-ms': '1000' });
    // A spent daily quota of one key is no reason to keep a client away for an hour.
    expect(await busyAfter({ a: 3_600_000, b: 7_200_000 })).toEqual({
      'retry-after': '60',
      'retry-after-ms': '60000',
    });
    expect(await busyAfter({ a: 0, b: 0 })).toEqual({ 'retry-after': '1', 'retry-after-ms': '1' });
  });

  it('answers 500 when any attempt failed for another reason', async () => {
    const { result } = await run((d) => (d.id === 'a' ? 'overloaded' : 'dropped'));
    expect(result).toBeInstanceOf(UpstreamFaultError);
    expect(result).toMatchObject({ status: 500 });
  });

  it('stops at once and passes the refusal on when the upstream rejects the request itself', async () => {
    const { result, calls } = await run(() => 'rejected');
    expect(result).toBeInstanceOf(InvalidRequestError);
    expect(calls).toEqual(['a#0']);
  });

  it('moves on when a deployment cannot express the request, and answers 400 only when none can', async () => {
    const some = await run((d) => (d.id === 'a' ? 'unsupported' : 'ok'));
    expect(some.calls).toEqual(['a#0', 'b#0']); // not a key problem: no key cycling
    expect(some.result).toMatchObject({ deployment: b });
    const none = await run(() => 'unsupported');
    expect(none.calls).toEqual(['a#0', 'b#0']);
    expect(none.result).toBeInstanceOf(InvalidRequestError);
    // One cannot express it, the other is busy: the client is told to retry (429), not that we broke (500).
    const busy = await run((d) => (d.id === 'a' ? 'unsupported' : 'overloaded'));
    expect(busy.result).toBeInstanceOf(EngineOverloadedError);
  });

  it('counts a request an upstream found too large for its quota against maxAttempts: it reached the upstream', async () => {
    const calls: string[] = [];
    const result = await withFallback(
      [a, b],
      { cycleKeys: true, maxAttempts: 1, clock: manualClock(), random: () => 0, attempts: [] },
      async (d) => {
        calls.push(d.id);
        throw new UpstreamFailure('unsupported', 'too large', { status: 429 });
      },
    ).catch((error: unknown) => error);
    expect(calls).toEqual(['a']);
    expect(result).toBeInstanceOf(InvalidRequestError);
  });

  it("keeps an attempt for each later deployment while cycling a failing one's keys", async () => {
    const six = deployment({
      id: 'six',
      provider: 'p6',
      keyRefs: ['env:K1', 'env:K2', 'env:K3', 'env:K4', 'env:K5', 'env:K6'],
    });
    const { calls, result } = await run((d) => (d.id === 'b' ? 'ok' : 'server_error'), {
      plan: [six, a, b],
      maxAttempts: 6,
    });
    // Four of six's keys, one of a's (its last allowed attempt), and b serves.
    expect(calls).toEqual(['six#0', 'six#1', 'six#2', 'six#3', 'a#0', 'b#0']);
    expect(result).toMatchObject({ deployment: b });
    // A key refused on its own is another matter: the next key is tried whatever comes after.
    const refused = await run((d, k) => (d.id === 'a' && k === 0 ? 'auth' : 'ok'), {
      plan: [a, six, b],
      maxAttempts: 3,
    });
    expect(refused.calls).toEqual(['a#0', 'a#1']);
  });

  it('never makes more than maxAttempts calls', async () => {
    const { calls, result } = await run(() => 'server_error', { maxAttempts: 2 });
    expect(calls).toHaveLength(2);
    expect(result).toBeInstanceOf(UpstreamFaultError);
  });

  it('does not count an attempt whose key could not be read against maxAttempts: nothing was sent', async () => {
    // The key ring's failure has no status (a refused key has the upstream's 401); with one call allowed, b serves.
    const attempts: Attempt[] = [];
    const calls: string[] = [];
    const result = await withFallback(
      [a, b],
      { cycleKeys: true, maxAttempts: 1, clock: manualClock(), random: () => 0, attempts },
      async (d, k) => {
        calls.push(`${d.id}#${k}`);
        if (d.id === 'a') throw new UpstreamFailure('auth', 'upstream key unavailable');
        return 'served';
      },
    );
    expect(result.value).toBe('served');
    expect(calls).toEqual(['a#0', 'a#1', 'a#2', 'b#0']);
    expect(countUpstreamCalls(attempts)).toBe(1);
    // A refused key (401) reached its upstream: it counts, and with one call allowed nothing else is tried.
    const refused = await run((d) => (d.id === 'a' ? 'auth' : 'ok'), { maxAttempts: 1 });
    expect(refused.calls).toEqual(['a#0']);
    expect(countUpstreamCalls(refused.attempts)).toBe(1);
  });

  it('does not count a deployment that could not express the request against maxAttempts', async () => {
    // 'a' cannot express it (no call made); with one attempt allowed, 'b' still gets it.
    const { calls, result } = await run((d) => (d.id === 'a' ? 'unsupported' : 'ok'), { maxAttempts: 1 });
    expect(calls).toEqual(['a#0', 'b#0']);
    expect(result).toMatchObject({ deployment: b });
  });
});

describe('withFallback at the call deadline', () => {
  const attemptUntilAborted = (signal: AbortSignal) =>
    new Promise<never>((_, reject) =>
      signal.addEventListener('abort', () =>
        reject(Object.assign(new Error('aborted'), { name: 'AbortError' })),
      ),
    );

  const runWithDeadline = async (
    deadline: AbortController,
    attempt: (d: Deployment, keyIndex: number) => Promise<string>,
  ) => {
    const attempts: Attempt[] = [];
    const calls: string[] = [];
    const result = await withFallback(
      [a, b],
      {
        cycleKeys: true,
        maxAttempts: 10,
        clock: manualClock(),
        random: () => 0,
        attempts,
        deadline: deadline.signal,
      },
      (d, k) => {
        calls.push(`${d.id}#${k}`);
        return attempt(d, k);
      },
    ).catch((error: unknown) => error);
    return { result, calls, attempts };
  };

  it('abandons the attempt under way, records it as cut, and starts no other', async () => {
    const deadline = new AbortController();
    setTimeout(() => deadline.abort(), 10);
    const { result, calls, attempts } = await runWithDeadline(deadline, () =>
      attemptUntilAborted(deadline.signal),
    );
    expect(result).toBeInstanceOf(UpstreamFaultError);
    expect((result as Error).message).toContain('longest time a call may take');
    expect(calls).toEqual(['a#0']);
    expect(attempts).toMatchObject([
      { deployment: 'a', outcome: 'timeout', detail: "cut at the call's deadline" },
    ]);
    expect(abandoned(attempts[0] as Attempt)).toBe(true);
  });

  it('stops with the RouteCancelled of a call refused admission, the attempt recorded as cancelled', async () => {
    const deadline = new AbortController();
    const refusal = new Error('402 insufficient balance');
    setTimeout(() => deadline.abort(new RouteCancelled(refusal)), 10);
    const { result, calls, attempts } = await runWithDeadline(deadline, () =>
      attemptUntilAborted(deadline.signal),
    );
    expect(result).toBeInstanceOf(RouteCancelled);
    expect((result as Error).cause).toBe(refusal);
    expect(calls).toEqual(['a#0']);
    expect(attempts).toMatchObject([{ deployment: 'a', outcome: 'cancelled' }]);
    expect(abandoned(attempts[0] as Attempt)).toBe(true);
  });

  it('starts nothing once the deadline has passed', async () => {
    const deadline = new AbortController();
    deadline.abort();
    const { result, calls, attempts } = await runWithDeadline(deadline, async (d) => d.id);
    expect(result).toBeInstanceOf(UpstreamFaultError);
    expect(calls).toEqual([]);
    expect(attempts).toEqual([]);
  });

  it("takes a failure that comes with the deadline for the deadline's, not the deployment's", async () => {
    const deadline = new AbortController();
    const { result, calls, attempts } = await runWithDeadline(deadline, async () => {
      deadline.abort();
      throw new UpstreamFailure('server_error', 'upstream status 500', { status: 500 });
    });
    expect(result).toBeInstanceOf(UpstreamFaultError);
    expect(calls).toEqual(['a#0']);
    expect(abandoned(attempts[0] as Attempt)).toBe(true);
  });

  it('keeps a refusal of the request itself a 400, though the deadline came with it', async () => {
    const deadline = new AbortController();
    const { result } = await runWithDeadline(deadline, async () => {
      deadline.abort();
      throw new UpstreamFailure('rejected', 'upstream status 400', {
        status: 400,
        upstreamError: { message: 'bad schema', type: 'invalid_request_error', code: null, param: null },
      });
    });
    expect(result).toBeInstanceOf(InvalidRequestError);
  });

  it('leaves failures before the deadline to fallback, as without one', async () => {
    const deadline = new AbortController();
    const { result, attempts } = await runWithDeadline(deadline, async (d) => {
      if (d.id === 'a') throw new UpstreamFailure('connect', 'refused');
      return d.id;
    });
    expect(result).toMatchObject({ value: 'b', deployment: b });
    expect(attempts.some(abandoned)).toBe(false);
  });
});
