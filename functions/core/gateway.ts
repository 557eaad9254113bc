import { type Admission, type AdmissionRequest, AdmissionUnknownError } from './admission.ts';
import type { Authenticator } from './authenticator.ts';
import type { CallRecorder } from './call-recorder.ts';
import type { ApiError } from './errors.ts';
import {
  type Attempt,
  abandoned,
  cancelledAttempt,
  deadlineError,
  keyUnread,
  RouteCancelled,
  type Served,
  withFallback,
} from './fallback.ts';
import { type HealthBoard, NEUTRAL, type ProbeToken } from './health.ts';
import type { Alarms, Clock, Random, Warn } from './ports.ts';
import type { Catalog, Deployment, ModelKind, Resolved } from './registry.ts';
import { planRoute, unroutable } from './routing.ts';
import { type SettlementRecord, tokenCorrectionOf } from './settlement.ts';

/** `BilledCall.discard` when a call's route produces nothing to release: one function for every call. */
const keepAll = (): void => {};

/** A probe whose answer closed its circuit (health's tokens start at 1). */
const ANSWERED: ProbeToken = 0;

/**
 * Whether a call's attempts are timed to a first byte — a stream's, or speech's (it answers as its first audio
 * arrives) — rather than to a whole reply, whose length the client's request decides.
 */
const timesFirstByte = (call: CallRecorder): boolean => call.stream || call.endpoint === 'audio.speech';

/** Whether a deployment's attempts in this call were timed to their first byte: not a stream's timed to a whole reply. */
const timedToFirstByte = (call: CallRecorder, deploymentId: string): boolean =>
  timesFirstByte(call) && !call.timedToWholeReply(deploymentId);

/** The plan with the deployments `lastly` picks moved after the others, each group in its order. */
const putLast = (
  plan: readonly Deployment[],
  lastly: (deployment: Deployment) => boolean,
): readonly Deployment[] => {
  const last = plan.filter(lastly);
  return last.length === 0 ? plan : plan.filter((d) => !last.includes(d)).concat(last);
};

/** A billed call, as `Gateway.admitAndRoute` takes it. */
export interface BilledCall<T> {
  /** What admission checks and holds: the limits' estimate and the wallet's worst case. */
  readonly request: AdmissionRequest;
  readonly resolved: Resolved;
  readonly call: CallRecorder;
  /** Whether an upstream fault is retried with the deployment's next key (non-stream calls, spec §7). */
  readonly cycleKeys: boolean;
  /** One upstream call; it must pass `signal` on (see `Gateway.route`). */
  readonly attempt: (deployment: Deployment, keyIndex: number, signal: AbortSignal) => Promise<T>;
  /** Releases what the route produced for a call then refused admission (an open stream); nothing by default. */
  readonly discard?: (value: T) => void;
  /** Deployments routed after the others, where they would serve worse now (see `Gateway.route`). */
  readonly lastly?: (deployment: Deployment) => boolean;
}

export interface GatewayDeps {
  readonly authenticator: Authenticator;
  /** Null only when the local host runs with metering off (benchmark comparison). */
  readonly admission: Admission | null;
  /** The current registry snapshot (cached by the adapter). */
  readonly catalog: () => Promise<Catalog>;
  readonly clock: Clock;
  /** What a call's deadline (CallRecorder.endBy, firstByteBy) is kept on. */
  readonly alarms: Alarms;
  readonly random: Random;
  readonly maxAttempts: number;
  /** Deployment health of this instance; routing skips open circuits and learns from every attempt. */
  readonly health?: HealthBoard;
  /** Where an upstream's refusal of our own credentials is reported: the client never sees it, an operator must. */
  readonly warn?: Warn;
}

/**
 * What a client cut at the first-byte limit is told to do, by what it called. Only a non-stream chat call has a
 * longer way (a stream, once begun, may run as long as the call needs); a stream or speech already is that way,
 * its providers were only slow to begin; embeddings and transcriptions have no stream, only a smaller call.
 */
const firstByteAdvice = (call: CallRecorder): string => {
  switch (call.endpoint) {
    case 'chat.completions':
      return call.stream
        ? 'Please retry.'
        : 'For long calls, set "stream": true: a stream, once begun, may run as long as the call needs.';
    case 'embeddings':
      return 'Please retry, or send fewer inputs per call.';
    case 'audio.transcriptions':
      return 'Please retry, or send a shorter recording.';
    case 'audio.speech':
      return 'Please retry.';
  }
};

/**
 * When routing must stop, and what the client is told then: the function's end (`endBy`), or sooner the moment
 * what is in front of the function (the CDN, the REST API) stops waiting for the response to begin (`firstByteBy`).
 */
const routeDeadline = (call: CallRecorder): { at: number | null; error: () => ApiError } => {
  const { endBy, firstByteBy } = call;
  if (firstByteBy !== null && (endBy === null || firstByteBy < endBy)) {
    return {
      at: firstByteBy,
      error: () =>
        deadlineError(
          `No upstream provider answered within the time this endpoint waits for a response to begin. ${firstByteAdvice(call)}`,
        ),
    };
  }
  return { at: endBy, error: () => deadlineError() };
};

/**
 * The steps every inference endpoint shares — authenticate, resolve the model, route with fallback —
 * each recording into the call's recorder. Endpoints supply only what differs: their request shape,
 * their estimate and their upstream call.
 */
export class Gateway {
  readonly #deps: GatewayDeps;
  /**
   * The half-open probes each call's route claimed, until the call's end settles them; ANSWERED for the one whose
   * answer has already closed its circuit.
   */
  readonly #probes = new WeakMap<CallRecorder, ReadonlyMap<string, ProbeToken>>();

  constructor(deps: GatewayDeps) {
    this.#deps = deps;
  }

  async authenticate(authorization: string | undefined, call: CallRecorder): Promise<void> {
    call.principal = await this.#deps.authenticator.authenticate(authorization);
  }

  /** Authentication alone, for endpoints that call no model (the catalog listing). */
  async authenticateOnly(authorization: string | undefined): Promise<void> {
    await this.#deps.authenticator.authenticate(authorization);
  }

  async resolve(modelId: string, kind: ModelKind, call: CallRecorder): Promise<Resolved> {
    const catalog = await this.#deps.catalog();
    // Recorded before resolving: a call that names a listed model is that model's also when nothing can serve it
    // (its 503 for want of an eligible deployment is a fault in the model's row, ADR 0008).
    call.model = catalog.named(modelId, kind);
    const resolved = catalog.resolve(modelId, kind);
    call.model = resolved.model;
    return resolved;
  }

  /**
   * Admission (limits and the wallet hold) in one store round trip; its headers ride on every response.
   * Refusals throw: 429 with Retry-After, 402 with the balance, 503 when the store cannot be reached.
   */
  async #admit(request: AdmissionRequest, call: CallRecorder): Promise<void> {
    const { admission } = this.#deps;
    if (!admission) return;
    // Fail closed: an endpoint that routed a call it never authenticated would serve it unmetered.
    if (!call.principal) throw new Error('a call reached admission without authentication');
    const started = this.#deps.clock.now();
    try {
      call.admitted(await admission.admit(call.principal, request));
    } catch (error) {
      // Perhaps admitted after all: settlement releases the hold if it was taken (nothing else to correct).
      if (error instanceof AdmissionUnknownError && error.possibleHold) call.possiblyHeld(error.possibleHold);
      throw error;
    }
    call.admissionMs = this.#deps.clock.now() - started;
  }

  /**
   * Admission, then routing — with the two overlapped when this instance expects the admission to pass
   * (Admission.expects): the route starts at once, beside the store's round trip, and its value is returned only
   * once the hold is taken, so nothing reaches the client unadmitted and metering adds to the call only what is
   * left of its round trip when the upstream has answered (ADR 0011). A refusal cancels the route — the attempt
   * under way is abandoned, counted against no deployment — and `discard` releases what the route had already
   * produced (an open stream); the client gets the refusal, as it would have without the overlap. A route that
   * fails first still waits for the admission, so that its hold is on the call for settlement to release.
   */
  async admitAndRoute<T>(billed: BilledCall<T>): Promise<T> {
    const { request, resolved, call, cycleKeys, attempt, discard = keepAll, lastly } = billed;
    const { admission, clock } = this.#deps;
    // A model none of whose deployments may take a call now is refused before admission charges the client's limits.
    const refused = unroutable(resolved.deployments, this.#deps.health);
    if (refused) throw refused;
    if (!admission || !call.principal || !admission.expects(call.principal, request)) {
      await this.#admit(request, call);
      return this.route(resolved, call, cycleKeys, attempt, undefined, lastly);
    }
    const cancel = new AbortController();
    const admitting = this.#admit(request, call);
    admitting.catch((refusal: unknown) => cancel.abort(new RouteCancelled(refusal)));
    // Set when the route settles, which allSettled below waits for.
    let routedAt = 0;
    const routing = this.route(resolved, call, cycleKeys, attempt, cancel.signal, lastly).finally(() => {
      routedAt = clock.now();
    });
    const [admitted, routed] = await Promise.allSettled([admitting, routing]);
    if (admitted.status === 'rejected') {
      if (routed.status === 'fulfilled') {
        discard(routed.value);
        this.#unserve(call);
      }
      throw admitted.reason;
    }
    call.admissionWaitMs = Math.max(0, clock.now() - routedAt);
    if (routed.status === 'rejected') throw routed.reason;
    return routed.value;
  }

  /**
   * A call whose route answered but which was then refused admission: served to no one. Its answering attempt is
   * recorded as cancelled, no verdict on the deployment — a stream's first event, from a stream closed unread, says
   * nothing of how it would have ended. A half-open probe it answered has closed its circuit already (route): the
   * deployment answered.
   */
  #unserve(call: CallRecorder): void {
    const served = call.attempts.findLastIndex((a) => a.outcome === 'ok');
    const attempt = call.attempts[served];
    if (attempt) {
      call.attempts[served] = cancelledAttempt(attempt);
      const probe = this.#probes.get(call)?.get(attempt.deployment);
      if (probe) this.#deps.health?.release(attempt.deployment, probe);
    }
    this.#probes.delete(call);
    call.deployment = null;
    call.upstreamMs = null;
  }

  /**
   * Tries the model's deployments in route order until one answers. `cycleKeys` is on for non-stream
   * calls (spec §7). The serving deployment is recorded on the call.
   *
   * `attempt` must pass its `signal` to the upstream request: it aborts at the call's deadline
   * (`call.endBy`), which bounds the whole route — a slow upstream's attempts, each within its own timeout,
   * could otherwise add up past the invocation's end (6 × 180 s against chat's 900 s), and an invocation
   * killed there answers the client nothing and settles nothing. For a stream the signal matters only until
   * its first event: the relay body keeps the deadline from there (http/relay-body.ts). `cancel` stops the route
   * the same way, with its reason (admitAndRoute: the call was refused admission). Deployments `lastly` picks are
   * tried after all the others, in route order (a stream's deployments that would answer with a whole reply).
   */
  async route<T>(
    resolved: Resolved,
    call: CallRecorder,
    cycleKeys: boolean,
    attempt: (deployment: Deployment, keyIndex: number, signal: AbortSignal) => Promise<T>,
    cancel?: AbortSignal,
    lastly?: (deployment: Deployment) => boolean,
  ): Promise<T> {
    const { clock, alarms, random, maxAttempts, health } = this.#deps;
    const started = clock.now();
    const planned = planRoute(resolved.deployments, random, health);
    const plan = lastly ? putLast(planned.deployments, lastly) : planned.deployments;
    const probes = planned.probes;
    if (probes.size > 0) this.#probes.set(call, probes);
    const before = call.attempts.length;
    const deadline = new AbortController();
    const { at, error } = routeDeadline(call);
    let disarm: (() => void) | null = null;
    // Already past (a request that waited too long in front of us): no attempt at all, not one started and cut.
    if (at !== null && at <= alarms.now()) deadline.abort(error());
    else if (at !== null) disarm = alarms.at(at, () => deadline.abort(error()));
    const onCancel = () => deadline.abort(cancel?.reason);
    if (cancel?.aborted) onCancel();
    else cancel?.addEventListener('abort', onCancel, { once: true });
    try {
      const served: Served<T> = await withFallback(
        plan,
        {
          cycleKeys,
          maxAttempts,
          clock,
          random,
          attempts: call.attempts,
          deadline: deadline.signal,
          ...(health ? { keys: health } : {}),
        },
        (deployment, keyIndex) => attempt(deployment, keyIndex, deadline.signal),
      );
      call.deployment = served.deployment;
      call.upstreamMs = clock.now() - started;
      const probe = probes.get(served.deployment.id);
      if (health && probe !== undefined) {
        // The deployment answered its probe (a stream's first event, a whole reply): its circuit closes now, not when
        // the call ends. A probe still streaming when the cool-down ran out again would be superseded, its success
        // settling nothing — a recovered deployment kept out for as long as its answers take, a model served by it
        // alone refused meanwhile. A stream that breaks later counts as any closed circuit's failure (observeEnd).
        const answered = call.attempts.findLast((a) => a.outcome === 'ok');
        health.record(
          served.deployment.id,
          'ok',
          timedToFirstByte(call, served.deployment.id) ? (answered?.ms ?? null) : null,
          probe,
        );
        this.#probes.set(call, new Map(probes).set(served.deployment.id, ANSWERED));
      }
      return served.value;
    } finally {
      disarm?.();
      cancel?.removeEventListener('abort', onCancel);
      // A key the provider refuses (revoked, out of credit) is invisible to clients — key cycling and fallback
      // serve them — so it is said here, once per refused attempt, naming the key by its place in the deployment.
      // One that could not be read (no status: nothing was sent) is the operator's configuration, said as such.
      for (const a of call.attempts.slice(before)) {
        if (a.outcome !== 'auth') continue;
        const unread = keyUnread(a);
        this.#deps.warn?.(unread ? 'an upstream key could not be read' : 'an upstream refused our key', {
          deployment: a.deployment,
          keyIndex: a.keyIndex,
          ...(unread ? { detail: a.detail } : { status: a.status }),
        });
      }
      // Failed attempts count now; the one that served is judged when the call ends (observeEnd), because a
      // stream that breaks after its first byte was not a success.
      // A deployment that served after one of its keys failed is healthy: that was the key's fault (and key
      // cycling handled it); counting it would reopen a circuit whose probe just succeeded.
      if (health) {
        const attempts = call.attempts.slice(before);
        const served = attempts.find((a) => a.outcome === 'ok')?.deployment;
        // An attempt cut at the call's deadline, or cancelled with its call, is no verdict either: the
        // deployment's own timeouts judge it.
        const judged = attempts.filter((a) => !abandoned(a));
        // One verdict per deployment per call — its last attempt's, after key cycling: three keys each refusing
        // one request (a client's prompt too large for each key's quota) are not three overloads in a row.
        // A failure health counts outweighs one it ignores (a 5xx on one key, then the request refused on the next).
        const verdicts = new Map<string, Attempt>();
        for (const a of judged) {
          if (a.outcome === 'ok' || a.deployment === served) continue;
          const kept = verdicts.get(a.deployment);
          if (!kept || !NEUTRAL.has(a.outcome) || NEUTRAL.has(kept.outcome)) verdicts.set(a.deployment, a);
        }
        // A failed attempt's time speaks of the deployment only where its timeout was the first byte's: a non-stream
        // call's timeout also runs while the reply is generated, as long as the client's answer needs.
        for (const a of verdicts.values())
          health.record(
            a.deployment,
            a.outcome,
            timedToFirstByte(call, a.deployment) ? a.ms : null,
            probes.get(a.deployment) ?? null,
          );
        // A probe whose request ended before its attempt did (the client went away) leaves no verdict.
        for (const [deployment, probe] of probes)
          if (!judged.some((a) => a.deployment === deployment)) health.release(deployment, probe);
      }
    }
  }

  /** Lets admission's memory of the account's buckets take the correction its settlement will make. */
  expectSettlement(record: SettlementRecord): void {
    const correction = tokenCorrectionOf(record, this.#deps.clock.now());
    if (correction && record.accountId) this.#deps.admission?.expectCorrection(record.accountId, correction);
  }

  /** Tells deployment health how the served attempt ended: whole, or as a stream broken mid-way. */
  observeEnd(call: CallRecorder, outcome: string): void {
    const health = this.#deps.health;
    const served = call.attempts.findLast((a) => a.outcome === 'ok');
    if (!health || !served) return;
    const probe = this.#probes.get(call)?.get(served.deployment) ?? null;
    // A non-stream reply's time is its whole generation's, which the client's request decides: not the
    // deployment's latency (health.ts `record`).
    const firstByteMs = timedToFirstByte(call, served.deployment) ? served.ms : null;
    const broke = outcome === 'stream_interrupted';
    // An answered probe's success is counted (route): only its stream breaking is news.
    if (probe === ANSWERED) {
      if (broke) health.record(served.deployment, 'dropped', firstByteMs);
      return;
    }
    health.record(served.deployment, broke ? 'dropped' : 'ok', firstByteMs, probe);
  }
}
