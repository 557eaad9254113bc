import { type Attempt, BUSY, type FailureKind, type KeyMemory, type UpstreamFailure } from './fallback.ts';
import type { Clock } from './ports.ts';

/**
 * Deployment health, per Lambda instance (ADR 0006): a rolling window of attempt outcomes and latencies per
 * deployment, and a circuit breaker on top of it.
 *
 * - **closed**: routed normally. It opens when, over the window, at least `minCalls` attempts failed at
 *   `failureRate` or more, after `overloadRun` overloads in a row (an overloaded provider is not helped by
 *   more traffic), or after `failureRun` failures of any kind in a row, however far apart: a deployment that
 *   hangs costs each attempt its whole timeout, and a Lambda instance serves one call at a time, so it would
 *   never gather `minCalls` samples within the window and would stay first in line for ever.
 * - **open**: skipped by routing for a cool-down, which doubles (up to `maxCooldownMs`) each time a probe fails.
 * - **half-open**: after the cool-down, one request at a time may probe it (routing puts it first); success
 *   closes the circuit with a fresh window, failure opens it again. The probe is identified by the token
 *   `claimProbe` hands out: only an outcome reported with that token settles it, so a straggler (a stream
 *   that began before the circuit opened, say) can neither close nor reopen the circuit in its place.
 *
 * A closed deployment that fails often or answers slowly is **degraded**: still routed, but after the healthy
 * deployments of its priority.
 */
export interface HealthPolicy {
  readonly windowMs: number;
  readonly minCalls: number;
  /** Failure share (0–1) over the window that opens the circuit. */
  readonly failureRate: number;
  /** Consecutive overloads that open the circuit. */
  readonly overloadRun: number;
  /** Consecutive failures of any kind that open the circuit, however long they took to come. */
  readonly failureRun: number;
  readonly cooldownMs: number;
  readonly maxCooldownMs: number;
}

export const DEFAULT_HEALTH_POLICY: HealthPolicy = {
  windowMs: 60_000,
  minCalls: 5,
  failureRate: 0.5,
  overloadRun: 3,
  failureRun: 3,
  cooldownMs: 15_000,
  maxCooldownMs: 300_000,
};

export type CircuitState = 'closed' | 'open' | 'half-open';

/** One half-open probe, as handed out by `claimProbe`; the request reports its outcome with it. */
export type ProbeToken = number;

/** Why a circuit is open: all-overloaded models answer 429 (retry later), anything else 503. */
export type OpenReason = 'overloaded' | 'failing';

export interface DeploymentHealthView {
  readonly state: CircuitState;
  readonly reason: OpenReason | null;
  readonly degraded: boolean;
  readonly calls: number;
  readonly failures: number;
  readonly busy: number;
  /** Median latency of successful attempts in the window, ms (null: none). */
  readonly p50Ms: number | null;
}

/** Outcomes that say nothing about the deployment: the request itself was refused. */
export const NEUTRAL: ReadonlySet<Attempt['outcome']> = new Set<FailureKind>(['rejected', 'unsupported']);

/** Share of failures that marks a closed deployment as degraded. */
const DEGRADED_FAILURE_RATE = 0.2;
/** A deployment this many times slower (median) than the fastest of its model is degraded. */
const DEGRADED_SLOWDOWN = 3;
/** …and at least this much slower, so sub-millisecond noise on loopback never counts. */
const DEGRADED_MIN_EXTRA_MS = 250;
/** How stale the median latency may be; it is a sort of the window, too dear for every request. */
const P50_REFRESH_MS = 1000;
/** What a request is told to wait while another is probing the circuit. */
const PROBE_UNDER_WAY_MS = 2000;
/** Samples kept per deployment; the window is also bounded in time. */
const MAX_SAMPLES = 200;

interface Sample {
  readonly at: number;
  readonly ok: boolean;
  readonly busy: boolean;
  /** Time to the first byte, ms; null when the attempt's time says nothing about the deployment (see record). */
  readonly ms: number | null;
}

interface Counts {
  readonly calls: number;
  readonly failures: number;
  /** Failures that were "busy" (overloaded, rate-limited). */
  readonly busy: number;
  readonly p50Ms: number | null;
}

interface Circuit {
  samples: Sample[];
  /** Running totals over `samples`, kept as samples enter and leave. */
  failures: number;
  busy: number;
  /** Median successful latency as last computed, and when (see #counts). */
  p50Ms: number | null;
  p50At: number;
  overloadRun: number;
  failureRun: number;
  state: 'closed' | 'open';
  reason: OpenReason | null;
  openedAt: number;
  cooldownMs: number;
  /** The half-open probe in flight, and when it was handed out (null: none). */
  probe: { readonly token: ProbeToken; readonly at: number } | null;
}

/** How long a key the upstream refused (401/403/402) is tried last: as long as the key ring caches a refused key. */
const REFUSED_KEY_SHUN_MS = 60_000;
/** A key whose own quota is spent is tried last for its Retry-After (a second when none), at most this long. */
const MAX_SPENT_KEY_SHUN_MS = 60_000;
const DEFAULT_SPENT_KEY_SHUN_MS = 1_000;

export class HealthBoard implements KeyMemory {
  readonly #policy: HealthPolicy;
  readonly #clock: Clock;
  readonly #circuits = new Map<string, Circuit>();
  /** Keys that failed on their own (deployment id and key index) → until when they are tried last. */
  readonly #shunnedKeys = new Map<string, number>();
  #lastProbe: ProbeToken = 0;

  constructor(policy: HealthPolicy, clock: Clock) {
    this.#policy = policy;
    this.#clock = clock;
  }

  /**
   * Records one attempt's outcome (from fallback) or a stream that broke after its first byte. `probe` is the
   * token of the half-open probe this attempt was, if it was one. `ms` is the attempt's time to its first byte:
   * null for a non-stream call's attempt, whose time is the whole generation's — long because the client asked
   * for a long answer, not because the deployment is slow — and must not be ranked against streams' first events,
   * nor its timeout taken for a hang (the failure run).
   */
  record(
    deploymentId: string,
    outcome: Attempt['outcome'],
    ms: number | null,
    probe: ProbeToken | null = null,
  ): void {
    const circuit = this.#circuits.get(deploymentId);
    if (circuit?.state === 'open') {
      // Only the probe's own outcome counts; anything else is a straggler from before the circuit opened.
      if (probe === null || circuit.probe?.token !== probe) return;
      circuit.probe = null;
      // A probe the upstream could not judge (the request itself was refused) leaves the next request to probe.
      if (NEUTRAL.has(outcome)) return;
      const now = this.#clock.now();
      if (outcome !== 'ok') {
        this.#open(circuit, BUSY.has(outcome) ? 'overloaded' : 'failing', now, true);
        return;
      }
      this.#close(circuit);
      this.#add(circuit, { at: now, ok: true, busy: false, ms });
      return;
    }
    if (NEUTRAL.has(outcome)) return;
    this.#recordWhileClosed(this.#circuit(deploymentId), outcome, ms);
  }

  /** Whether a key failed on its own lately, so calls try the deployment's other keys first (KeyMemory). */
  shunned(deploymentId: string, keyIndex: number): boolean {
    const key = `${deploymentId}#${keyIndex}`;
    const until = this.#shunnedKeys.get(key);
    if (until === undefined) return false;
    if (until > this.#clock.now()) return true;
    this.#shunnedKeys.delete(key);
    return false;
  }

  /** A key refused, or its own quota spent: tried last for a while (a minute; a spent one, its Retry-After). */
  failed(deploymentId: string, keyIndex: number, failure: UpstreamFailure): void {
    const ms =
      failure.kind === 'auth'
        ? REFUSED_KEY_SHUN_MS
        : Math.min(MAX_SPENT_KEY_SHUN_MS, failure.retryAfterMs ?? DEFAULT_SPENT_KEY_SHUN_MS);
    this.#shunnedKeys.set(`${deploymentId}#${keyIndex}`, this.#clock.now() + ms);
  }

  /** A probe that ended without any outcome (its request went away first): the next request may probe. */
  release(deploymentId: string, probe: ProbeToken): void {
    const circuit = this.#circuits.get(deploymentId);
    if (circuit?.probe?.token === probe) circuit.probe = null;
  }

  /** A closed circuit learns from every outcome and opens on too many failures or a run of overloads. */
  #recordWhileClosed(circuit: Circuit, outcome: Attempt['outcome'], ms: number | null): void {
    const now = this.#clock.now();
    const ok = outcome === 'ok';
    this.#add(circuit, { at: now, ok, busy: BUSY.has(outcome), ms });
    circuit.overloadRun = BUSY.has(outcome) ? circuit.overloadRun + 1 : 0;
    // A timeout whose time says nothing of the deployment (`ms` null: a non-stream reply's, which runs as long as the
    // client's answer needs) neither extends the run nor breaks it: three long answers in a row are no hang.
    if (ok) circuit.failureRun = 0;
    else if (!(outcome === 'timeout' && ms === null)) circuit.failureRun++;
    if (circuit.overloadRun >= this.#policy.overloadRun) {
      this.#open(circuit, 'overloaded', now, false);
      return;
    }
    if (circuit.failureRun >= this.#policy.failureRun) {
      this.#open(circuit, 'failing', now, false);
      return;
    }
    const { calls, failures, busy } = this.#counts(circuit, now);
    if (calls >= this.#policy.minCalls && failures / calls >= this.#policy.failureRate) {
      // An upstream that only ever said "busy" is overloaded, however its answers interleaved.
      this.#open(circuit, busy === failures ? 'overloaded' : 'failing', now, false);
    }
  }

  /** The circuit's state now; an open circuit whose cool-down has passed is half-open. */
  state(deploymentId: string): CircuitState {
    const circuit = this.#circuits.get(deploymentId);
    if (!circuit || circuit.state === 'closed') return 'closed';
    return this.#clock.now() - circuit.openedAt >= circuit.cooldownMs ? 'half-open' : 'open';
  }

  /**
   * How long until an open circuit half-opens and a request may probe it, ms: 0 when it is not open or its probe
   * is due. While a probe is under way, a moment: its answer (within an upstream timeout) closes or reopens the
   * circuit, and the client learns which on its next try — not at the end of a cool-down that may be minutes.
   */
  reopensInMs(deploymentId: string): number {
    const circuit = this.#circuits.get(deploymentId);
    if (!circuit || circuit.state === 'closed') return 0;
    const now = this.#clock.now();
    const halfOpen = circuit.openedAt + circuit.cooldownMs;
    if (halfOpen > now) return halfOpen - now;
    return circuit.probe === null ? 0 : PROBE_UNDER_WAY_MS;
  }

  reason(deploymentId: string): OpenReason | null {
    return this.#circuits.get(deploymentId)?.reason ?? null;
  }

  /**
   * Claims the half-open probe for one request: its token, or null when the deployment is not half-open or
   * its probe is taken. Only one probe is in flight at a time; one that never reported back (its request
   * died without a word) is given up after a cool-down, and its token then settles nothing.
   */
  claimProbe(deploymentId: string): ProbeToken | null {
    if (!this.probeFree(deploymentId)) return null;
    const circuit = this.#circuit(deploymentId);
    const now = this.#clock.now();
    circuit.probe = { token: ++this.#lastProbe, at: now };
    return circuit.probe.token;
  }

  /** Whether a half-open deployment's probe is free for a request to claim (claimProbe would give one). */
  probeFree(deploymentId: string): boolean {
    const circuit = this.#circuits.get(deploymentId);
    if (!circuit || this.state(deploymentId) !== 'half-open') return false;
    return circuit.probe === null || this.#clock.now() - circuit.probe.at >= circuit.cooldownMs;
  }

  /** Closed, but failing more than a little or much slower than the model's fastest deployment. */
  degraded(deploymentId: string, fastestP50Ms: number | null): boolean {
    const circuit = this.#circuits.get(deploymentId);
    if (circuit?.state !== 'closed') return false;
    const { calls, failures, p50Ms } = this.#counts(circuit, this.#clock.now());
    if (calls >= this.#policy.minCalls && failures / calls >= DEGRADED_FAILURE_RATE) return true;
    return (
      p50Ms !== null &&
      fastestP50Ms !== null &&
      p50Ms > fastestP50Ms * DEGRADED_SLOWDOWN &&
      p50Ms - fastestP50Ms > DEGRADED_MIN_EXTRA_MS
    );
  }

  view(deploymentId: string, fastestP50Ms: number | null = null): DeploymentHealthView {
    const circuit = this.#circuits.get(deploymentId);
    const counts = circuit
      ? this.#counts(circuit, this.#clock.now())
      : { calls: 0, failures: 0, busy: 0, p50Ms: null };
    return {
      state: this.state(deploymentId),
      reason: circuit?.state === 'open' ? circuit.reason : null,
      degraded: this.degraded(deploymentId, fastestP50Ms),
      ...counts,
    };
  }

  /** Median successful latency in the window, for comparing a model's deployments. */
  p50Ms(deploymentId: string): number | null {
    const circuit = this.#circuits.get(deploymentId);
    return circuit ? this.#counts(circuit, this.#clock.now()).p50Ms : null;
  }

  #circuit(deploymentId: string): Circuit {
    let circuit = this.#circuits.get(deploymentId);
    if (!circuit) {
      circuit = {
        samples: [],
        failures: 0,
        busy: 0,
        p50Ms: null,
        p50At: Number.NEGATIVE_INFINITY,
        overloadRun: 0,
        failureRun: 0,
        state: 'closed',
        reason: null,
        openedAt: 0,
        cooldownMs: this.#policy.cooldownMs,
        probe: null,
      };
      this.#circuits.set(deploymentId, circuit);
    }
    return circuit;
  }

  #add(circuit: Circuit, sample: Sample): void {
    circuit.samples.push(sample);
    if (!sample.ok) circuit.failures++;
    if (sample.busy) circuit.busy++;
    if (circuit.samples.length > MAX_SAMPLES) this.#drop(circuit);
  }

  #drop(circuit: Circuit): void {
    const gone = circuit.samples.shift() as Sample;
    if (!gone.ok) circuit.failures--;
    if (gone.busy) circuit.busy--;
  }

  /**
   * The window's counts, read by routing on every request: calls and failures are running totals (exact), the
   * median latency — which only ranks deployments as degraded — is recomputed at most every P50_REFRESH_MS.
   */
  #counts(circuit: Circuit, now: number): Counts {
    const since = now - this.#policy.windowMs;
    while (circuit.samples.length > 0 && (circuit.samples[0] as Sample).at < since) this.#drop(circuit);
    if (now - circuit.p50At >= P50_REFRESH_MS) {
      const latencies: number[] = [];
      for (const s of circuit.samples) if (s.ok && s.ms !== null) latencies.push(s.ms);
      latencies.sort((a, b) => a - b);
      circuit.p50Ms =
        latencies.length > 0 ? (latencies[Math.floor((latencies.length - 1) / 2)] as number) : null;
      circuit.p50At = now;
    }
    return {
      calls: circuit.samples.length,
      failures: circuit.failures,
      busy: circuit.busy,
      p50Ms: circuit.p50Ms,
    };
  }

  #open(circuit: Circuit, reason: OpenReason, now: number, probeFailed: boolean): void {
    circuit.cooldownMs = probeFailed
      ? Math.min(circuit.cooldownMs * 2, this.#policy.maxCooldownMs)
      : this.#policy.cooldownMs;
    circuit.state = 'open';
    circuit.reason = reason;
    circuit.openedAt = now;
    circuit.probe = null;
    circuit.overloadRun = 0;
    circuit.failureRun = 0;
  }

  #close(circuit: Circuit): void {
    circuit.state = 'closed';
    circuit.reason = null;
    circuit.samples = [];
    circuit.failures = 0;
    circuit.busy = 0;
    circuit.p50Ms = null;
    circuit.p50At = Number.NEGATIVE_INFINITY;
    circuit.overloadRun = 0;
    circuit.failureRun = 0;
    circuit.cooldownMs = this.#policy.cooldownMs;
  }
}
