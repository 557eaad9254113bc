import { describe, expect, it } from 'vitest';
import type { AccountingStore, AdmitResult } from '#core/accounting.ts';
import { Admission, type AdmissionRequest } from '#core/admission.ts';
import { CallRecorder } from '#core/call-recorder.ts';
import { InsufficientBalanceError, ServiceUnavailableError, UpstreamFaultError } from '#core/errors.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import type { BilledCall } from '#core/gateway.ts';
import { HealthBoard } from '#core/health.ts';
import {
  chatModel,
  deployment,
  manualClock,
  TEST_HEALTH_POLICY,
  testGateway,
  trustedAccounts,
} from '#test/fixtures.ts';

/**
 * Admission beside routing (ADR 0011): when the instance expects a call to be admitted, its upstream call starts
 * before the store has answered, and nothing is returned before the hold is taken. A store whose answers the test
 * releases one at a time shows the order of things.
 */

const PRINCIPAL = { accountId: 'acct_a', keyPrefix: 'svc_live_abcd' };
const OTHER = { accountId: 'acct_b', keyPrefix: 'svc_live_efgh' };
const SHORT: AdmitResult = {
  ok: false,
  bucket: null,
  bucketGen: 0,
  wallet: { balance: 0, available: 10, owed: 0 },
  conflict: false,
};

/** Deployment health that also lists the outcomes it was told of. */
class RecordingHealth extends HealthBoard {
  readonly outcomes: string[] = [];

  override record(...args: Parameters<HealthBoard['record']>): void {
    this.outcomes.push(`${args[0]}:${args[1]}`);
    super.record(...args);
  }
}

const setup = () => {
  const clock = manualClock();
  /** Answers the store has not given yet, oldest first; `answer` gives the next one. */
  const waiting: ((result: AdmitResult | Error) => void)[] = [];
  let instant = true;
  const store: AccountingStore = {
    admit: () =>
      instant
        ? Promise.resolve({ ok: true })
        : new Promise<AdmitResult>((resolve, reject) =>
            waiting.push((r) => (r instanceof Error ? reject(r) : resolve(r))),
          ),
    settle: async () => 'settled',
    releaseExpiredHolds: async () => 0,
  };
  const admission = new Admission({
    store,
    accounts: trustedAccounts(clock, 3_600_000),
    clock,
    random: () => 0.5,
    sleep: async () => {},
    holdTtlMs: 60_000,
    maxAttempts: 1,
  });
  const health = new RecordingHealth(TEST_HEALTH_POLICY, clock);
  const gateway = testGateway({ admission, clock, health });
  const resolved = { model: chatModel(), deployments: [deployment({ id: 'a' })] };
  let n = 0;
  const call = (principal = PRINCIPAL) => {
    const recorder = new CallRecorder('chat.completions', `req_${++n}`, clock);
    recorder.principal = principal;
    return recorder;
  };
  const request = (recorder: CallRecorder, estimatedTokens = 100): AdmissionRequest => ({
    requestId: recorder.requestId,
    estimatedTokens,
    holdAmount: 1_000,
  });
  /** `c` admitted (with `request(c)` unless `more` says otherwise) and routed to `attempt`, keys cycled. */
  const admitAndRoute = <T>(
    c: CallRecorder,
    attempt: BilledCall<T>['attempt'],
    more: Partial<BilledCall<T>> = {},
  ): Promise<T> =>
    gateway.admitAndRoute({ request: request(c), resolved, call: c, cycleKeys: true, attempt, ...more });
  /** Upstream calls as they start, by label. */
  const upstream: string[] = [];
  /** A call of `principal` whose upstream answers `value` at once, noting `label` when it starts. */
  const serve = <T = string>(principal = PRINCIPAL, value: T = 'answer' as T, label = 'upstream') => {
    const c = call(principal);
    const served = admitAndRoute(c, async () => {
      upstream.push(label);
      return value;
    });
    return { c, served };
  };
  /** One call admitted straight away, so that the instance remembers the account. */
  const warm = async (principal = PRINCIPAL) => {
    const c = call(principal);
    await admitAndRoute(c, async () => 'warm');
  };
  const answer = async (result: AdmitResult | Error) => {
    // The admission reaches the store a few microtasks after it is asked for.
    for (let i = 0; i < 20 && waiting.length === 0; i++) await Promise.resolve();
    const next = waiting.shift();
    if (!next) throw new Error('the store was not asked');
    next(result);
  };
  /**
   * A call whose upstream never answers by itself (the refusal cancels it), asked of the store and answered
   * `result`: what the call then threw ('admitted' if nothing).
   */
  const refusedBy = async (result: AdmitResult | Error, c = call(), req = request(c)): Promise<unknown> => {
    const outcome = admitAndRoute(c, hanging([]), { request: req }).then(
      () => 'admitted',
      (error: unknown) => error,
    );
    await answer(result);
    return outcome;
  };
  const later = (ready: boolean) => {
    instant = ready;
  };
  return {
    admitAndRoute,
    clock,
    gateway,
    admission,
    health,
    resolved,
    call,
    request,
    serve,
    upstream,
    warm,
    answer,
    later,
    refusedBy,
  };
};

/** Settles a promise's state without waiting for it: 'pending', or how it ended. */
const stateOf = async (promise: Promise<unknown>) => {
  let state = 'pending';
  promise.then(
    () => {
      state = 'fulfilled';
    },
    () => {
      state = 'rejected';
    },
  );
  for (let i = 0; i < 20; i++) await Promise.resolve();
  return state;
};

/** An upstream attempt that never answers by itself: it ends when its signal aborts. */
const hanging = (calls: string[]) => (_d: unknown, _k: number, signal: AbortSignal) => {
  calls.push('upstream');
  return new Promise<string>((_resolve, reject) =>
    signal.addEventListener('abort', () =>
      reject(Object.assign(new Error('aborted'), { name: 'AbortError' })),
    ),
  );
};

describe('admission beside routing', () => {
  it('fails closed on a call that was never authenticated: no upstream call, no unmetered answer', async () => {
    const { admitAndRoute, call, upstream } = setup();
    const anonymous = call();
    anonymous.principal = null;
    const outcome = await admitAndRoute(anonymous, async () => {
      upstream.push('upstream');
      return 'answer';
    }).catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(Error);
    expect(upstream).toEqual([]);
  });

  it('waits for the store before the first call of an account it does not remember', async () => {
    const { serve, upstream, answer, later } = setup();
    later(false);
    const { c, served } = serve();
    expect(await stateOf(served)).toBe('pending');
    expect(upstream).toEqual([]);
    await answer({ ok: true });
    expect(await served).toBe('answer');
    expect(upstream).toEqual(['upstream']);
    expect(c.admissionWaitMs).toBeNull();
  });

  it('starts the upstream call of a remembered account at once, and answers only once the hold is taken', async () => {
    const { serve, upstream, warm, answer, later, clock } = setup();
    await warm();
    later(false);
    const { c, served } = serve();
    expect(await stateOf(served)).toBe('pending');
    expect(upstream).toEqual(['upstream']); // under way before the store answered
    expect(c.admission).toBeNull();
    clock.advance(3);
    await answer({ ok: true });
    expect(await served).toBe('answer');
    expect(c.admission?.hold).toEqual({ id: c.requestId, amount: 1_000 });
    expect(c.deployment?.id).toBe('a');
    expect(c.admissionWaitMs).toBe(3); // the answer waited 3 ms for the hold
  });

  it('cancels the route of a call the store refuses, counts nothing against the deployment, and throws the refusal', async () => {
    const { admitAndRoute, health, call, warm, answer, later } = setup();
    await warm();
    later(false);
    const calls: string[] = [];
    const c = call();
    const served = admitAndRoute(c, hanging(calls));
    expect(await stateOf(served)).toBe('pending');
    expect(calls).toEqual(['upstream']);
    await answer(SHORT);
    await expect(served).rejects.toBeInstanceOf(InsufficientBalanceError);
    expect(c.attempts).toMatchObject([{ deployment: 'a', outcome: 'cancelled' }]);
    expect(c.deployment).toBeNull();
    expect(c.admission).toBeNull();
    expect(health.outcomes).toEqual([]);
  });

  it('releases what the route already opened when the refusal comes after it', async () => {
    const { admitAndRoute, call, warm, answer, later } = setup();
    await warm();
    later(false);
    const discarded: string[] = [];
    const c = call();
    const served = admitAndRoute(c, async () => 'open stream', {
      cycleKeys: false,
      discard: (value) => discarded.push(value),
    });
    expect(await stateOf(served)).toBe('pending');
    await answer(SHORT);
    await expect(served).rejects.toBeInstanceOf(InsufficientBalanceError);
    expect(discarded).toEqual(['open stream']);
    expect(c.deployment).toBeNull();
  });

  it('waits for the admission when the route fails first, so that the hold is on the call to release', async () => {
    const { admitAndRoute, call, warm, answer, later } = setup();
    await warm();
    later(false);
    const c = call();
    const served = admitAndRoute(c, async () => {
      throw new UpstreamFailure('connect', 'refused');
    });
    expect(await stateOf(served)).toBe('pending');
    await answer({ ok: true });
    await expect(served).rejects.toBeInstanceOf(UpstreamFaultError);
    expect(c.admission?.hold).toEqual({ id: c.requestId, amount: 1_000 });
  });

  it('after a refusal, waits for the store on that account’s calls — until one is admitted again', async () => {
    const { serve, upstream, warm, answer, later, refusedBy } = setup();
    await warm();
    await warm(OTHER);
    later(false);
    expect(await refusedBy(SHORT)).toBeInstanceOf(InsufficientBalanceError);

    // The refused account: one after the other (a client retrying its 402 starts no upstream call).
    const second = serve().served;
    expect(await stateOf(second)).toBe('pending');
    expect(upstream).toEqual([]);
    // Another account of the same instance keeps its overlap.
    const third = serve(OTHER, 'other', 'other upstream').served;
    expect(await stateOf(third)).toBe('pending');
    expect(upstream).toEqual(['other upstream']);

    // A top-up later, the account is admitted again, and its next call overlaps once more.
    await answer({ ok: true });
    expect(await second).toBe('answer');
    await answer({ ok: true });
    expect(await third).toBe('other');
    const fourth = serve(PRINCIPAL, 'again', 'upstream again').served;
    expect(await stateOf(fourth)).toBe('pending');
    expect(upstream).toContain('upstream again');
    await answer({ ok: true });
    expect(await fourth).toBe('again');
  });

  it('after the store failed, waits for it on every account’s calls: an outage spends nothing upstream', async () => {
    const { serve, upstream, warm, answer, later, refusedBy } = setup();
    await warm();
    await warm(OTHER);
    later(false);
    expect(await refusedBy(new Error('connect ECONNREFUSED'))).toBeInstanceOf(ServiceUnavailableError);

    const second = serve(OTHER).served;
    expect(await stateOf(second)).toBe('pending');
    expect(upstream).toEqual([]);
    await answer({ ok: true });
    expect(await second).toBe('answer');
  });

  it('keeps a refused wallet doubted through the free or cheaper calls it can still afford', async () => {
    const { admitAndRoute, call, serve, upstream, warm, answer, later, refusedBy } = setup();
    await warm();
    later(false);
    const big = (c: CallRecorder) => ({ requestId: c.requestId, estimatedTokens: 100, holdAmount: 50_000 });
    const refused = call();
    expect(await refusedBy(SHORT, refused, big(refused))).toBeInstanceOf(InsufficientBalanceError);

    // A cheaper call passes: it says nothing of the 50,000 the wallet could not hold.
    const cheap = serve(PRINCIPAL, 'cheap', 'cheap upstream').served;
    await answer({ ok: true });
    expect(await cheap).toBe('cheap');
    const paid = call();
    const second = admitAndRoute(
      paid,
      async () => {
        upstream.push('big upstream');
        return 'big';
      },
      { request: big(paid) },
    );
    expect(await stateOf(second)).toBe('pending');
    expect(upstream).toEqual(['cheap upstream']); // the big call waits for the store
    // It passes (a top-up came): a hold as large as the refused one is proof; the overlap is back.
    await answer({ ok: true });
    expect(await second).toBe('big');
    const third = serve(PRINCIPAL, 'after', 'after upstream').served;
    expect(await stateOf(third)).toBe('pending');
    expect(upstream).toContain('after upstream');
    await answer({ ok: true });
    expect(await third).toBe('after');
  });

  it('records a call refused after its route answered as cancelled; a half-open probe it answered stays closed', async () => {
    const { admitAndRoute, gateway, health, call, warm, answer, later, clock } = setup();
    await warm();
    for (let i = 0; i < TEST_HEALTH_POLICY.overloadRun; i++) health.record('a', 'overloaded', 1);
    clock.advance(TEST_HEALTH_POLICY.cooldownMs);
    expect(health.state('a')).toBe('half-open');
    later(false);
    const c = call();
    c.stream = true;
    const served = admitAndRoute(c, async () => 'first event in hand', { cycleKeys: false });
    expect(await stateOf(served)).toBe('pending');
    await answer(SHORT);
    await expect(served).rejects.toBeInstanceOf(InsufficientBalanceError);
    expect(c.attempts).toMatchObject([{ deployment: 'a', outcome: 'cancelled' }]);
    expect(c.upstreamMs).toBeNull();
    gateway.observeEnd(c, 'insufficient_balance');
    // The deployment answered the probe (its first event), which closed its circuit whoever then read the stream.
    expect(health.state('a')).toBe('closed');
  });

  it("refuses a call none of whose deployments may take it before admission: the outage costs none of the client's limits", async () => {
    const { admitAndRoute, health, call, later, clock, upstream } = setup();
    later(false); // a store asked would leave the call pending
    for (let i = 0; i < TEST_HEALTH_POLICY.failureRun; i++) health.record('a', 'server_error', 1);
    expect(health.state('a')).toBe('open');
    const c = call();
    await expect(admitAndRoute(c, async () => 'never')).rejects.toBeInstanceOf(ServiceUnavailableError);
    expect(upstream).toEqual([]);
    expect(c.admission).toBeNull(); // no hold, no bucket charge: the store was not asked
    // Half-open with its probe free: admitted and routed as usual.
    clock.advance(TEST_HEALTH_POLICY.cooldownMs);
    later(true);
    expect(await admitAndRoute(call(), async () => 'probed')).toBe('probed');
  });

  it('keeps the store doubted until an admission asked after its failure passes, and not for one account’s contention', async () => {
    const { admitAndRoute, call, serve, upstream, warm, answer, later, clock, refusedBy } = setup();
    await warm();
    await warm(OTHER);
    later(false);
    // Asked before the store fails, answered after: it says nothing of the store since.
    const early = serve(OTHER, 'early', 'early upstream').served;
    const failing = call();
    const failed = admitAndRoute(failing, hanging([]));
    await answer({ ok: true });
    await answer(new Error('connect ECONNREFUSED'));
    expect(await early).toBe('early');
    await expect(failed).rejects.toBeInstanceOf(ServiceUnavailableError);
    clock.advance(1);
    const next = serve(OTHER, 'next', 'next upstream').served;
    expect(await stateOf(next)).toBe('pending');
    expect(upstream).toEqual(['early upstream']);
    await answer({ ok: true });
    expect(await next).toBe('next');

    // One account's transactions conflicting to the end is a 503 too, but about that account alone.
    const conflicted: AdmitResult = { ok: false, bucket: null, bucketGen: 0, wallet: null, conflict: true };
    expect(await refusedBy(conflicted)).toBeInstanceOf(ServiceUnavailableError);
    const other = serve(OTHER, 'other', 'other upstream').served;
    expect(await stateOf(other)).toBe('pending');
    expect(upstream).toContain('other upstream');
    await answer({ ok: true });
    expect(await other).toBe('other');
  });

  it('lets a burst of one account’s calls go upstream ahead of the store four at a time at most', async () => {
    const { serve, upstream, warm, answer, later } = setup();
    await warm();
    later(false);
    const burst = Array.from({ length: 10 }, (_, i) => serve(PRINCIPAL, i, `call ${i}`).served);
    expect(await stateOf(Promise.all(burst))).toBe('pending');
    // Were the wallet short, these four would be the only upstream calls paid for nothing.
    expect(upstream).toEqual(['call 0', 'call 1', 'call 2', 'call 3']);
    for (let i = 0; i < 10; i++) await answer({ ok: true });
    expect(await Promise.all(burst)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });
});

describe('Admission.expects', () => {
  it('expects a call only while the remembered buckets have room for it twice over', async () => {
    const { admission, warm } = setup();
    await warm();
    const ask = (estimatedTokens: number) =>
      admission.expects(PRINCIPAL, { requestId: 'req_x', estimatedTokens, holdAmount: 1 });
    // A trusted account's minute holds 2,000,000 tokens; 100 are spent.
    expect(ask(999_000)).toBe(true);
    expect(ask(1_000_000)).toBe(false);
    expect(admission.expects(OTHER, { requestId: 'req_y', estimatedTokens: 1, holdAmount: 1 })).toBe(false);
  });

  it('forgets its doubt after a minute', async () => {
    const { admission, warm, later, clock, refusedBy } = setup();
    await warm();
    later(false);
    expect(await refusedBy(SHORT)).toBeInstanceOf(InsufficientBalanceError);
    const ask = () => admission.expects(PRINCIPAL, { requestId: 'req_x', estimatedTokens: 1, holdAmount: 1 });
    expect(ask()).toBe(false);
    clock.advance(59_999);
    expect(ask()).toBe(false);
    clock.advance(1);
    expect(ask()).toBe(true);
  });
});
