import type { Admitted } from './admission.ts';
import type { Principal } from './authenticator.ts';
import { type Attempt, UpstreamFailure } from './fallback.ts';
import type { Clock } from './ports.ts';
import { costOf } from './pricing.ts';
import type { Deployment, Model } from './registry.ts';
import {
  type AdmissionRef,
  classifyError,
  type Endpoint,
  type Fault,
  type Outcome,
  type SettlementRecord,
} from './settlement.ts';
import { isCharged, type Usage } from './usage.ts';

/**
 * Collects what happens to one call — who, which model, every upstream attempt, how it ended — and turns
 * it into the settlement record once the response is over. Every path through a handler ends in exactly
 * one of `succeeded`, `aborted`, `interrupted` or `failed`; a record without one is a handler bug and is
 * reported as an internal error rather than silently billed.
 */
export class CallRecorder {
  readonly endpoint: Endpoint;
  readonly requestId: string;
  readonly receivedAt: number;
  readonly attempts: Attempt[] = [];
  readonly #clock: Clock;
  principal: Principal | null = null;
  model: Model | null = null;
  deployment: Deployment | null = null;
  stream = false;
  admission: AdmissionRef | null = null;
  /** `x-ratelimit-*` headers from admission, for whatever response the call ends with. */
  limitHeaders: Record<string, string> = {};
  /** How long admission's store round trip took, ms (null: not admitted, or metering off). */
  admissionMs: number | null = null;
  /**
   * When the route ran beside admission (Gateway.admitAndRoute): how long its answer then waited for the hold,
   * ms — what metering added to this call. Null: the two ran one after the other.
   */
  admissionWaitMs: number | null = null;
  /** From the first upstream attempt to the serving deployment's first byte, ms. */
  upstreamMs: number | null = null;
  /**
   * Epoch ms (wall clock) by which a relayed stream must end so that the invocation can still settle the call
   * before its function times out: Lambda kills a timed-out invocation, work after the response included, and a
   * call it killed would be neither charged nor recorded. Null: no deadline known.
   */
  endBy: number | null = null;
  /**
   * Epoch ms by which the response must begin, when something in front of the function stops waiting sooner
   * than the function runs (the CDN's origin read timeout). Routing stops there; a stream, once begun, runs to
   * `endBy`. Null: only `endBy` bounds the wait.
   */
  firstByteBy: number | null = null;
  #firstByteAt: number | null = null;
  /** Deployments whose stream attempts in this call were timed to a whole reply (`wholeReplyFrom`). */
  #wholeReplies: Set<string> | null = null;
  /** When the handler took the call, to the clock's precision (`receivedAt` is whole milliseconds). */
  readonly #startedAt: number;
  #unread: (() => void) | null = null;
  #end: { outcome: Outcome; status: number; usage: Usage | null; fault: Fault | null } | null = null;

  constructor(endpoint: Endpoint, requestId: string, clock: Clock) {
    this.endpoint = endpoint;
    this.requestId = requestId;
    this.#clock = clock;
    // Whole milliseconds: it orders the ledger and names the day of the usage aggregates.
    this.#startedAt = clock.now();
    this.receivedAt = Math.floor(this.#startedAt);
  }

  /**
   * An attempt of this stream on the deployment was made for, answered with, or given the time of a whole reply: its
   * time to the first event, or to its timeout, is the generation's, which the client's request decides, as a
   * non-stream call's is — not the deployment's.
   */
  wholeReplyFrom(deploymentId: string): void {
    this.#wholeReplies ??= new Set();
    this.#wholeReplies.add(deploymentId);
  }

  /** Whether the deployment's attempts in this stream were timed to a whole reply (`wholeReplyFrom`). */
  timedToWholeReply(deploymentId: string): boolean {
    return this.#wholeReplies?.has(deploymentId) === true;
  }

  admitted(admitted: Admitted): void {
    this.admission = {
      hold: admitted.hold,
      estimatedTokens: admitted.estimatedTokens,
      tokenEmissionUs: admitted.tokenEmissionUs,
      tokenTatUs: admitted.tokenTatUs,
      limitsGen: admitted.limitsGen,
    };
    this.limitHeaders = admitted.headers;
  }

  /**
   * An admission the store may have written without answering (AdmissionUnknownError): its hold is recorded so
   * settlement releases it if it exists. No tokens: a bucket charge that landed stays, as a refused call's would.
   */
  possiblyHeld(hold: { readonly id: string; readonly amount: number }): void {
    this.admission = { hold, estimatedTokens: 0, tokenEmissionUs: { tpm: 0, tpd: 0 } };
  }

  /** `Server-Timing` for the response: where the gateway's time went, for clients and operators alike. */
  serverTiming(): string | null {
    const parts: string[] = [];
    if (this.admissionMs !== null) parts.push(`admit;dur=${this.admissionMs.toFixed(2)}`);
    if (this.admissionWaitMs !== null) parts.push(`admit-wait;dur=${this.admissionWaitMs.toFixed(2)}`);
    if (this.upstreamMs !== null) parts.push(`upstream;dur=${this.upstreamMs.toFixed(2)}`);
    // The handler's whole share, up to the response's start: what the client waited beyond it is the way in and out
    // (the Function URL or API Gateway in front, the network), which no other entry shows.
    if (this.#firstByteAt !== null)
      parts.push(`handler;dur=${(this.#firstByteAt - this.#startedAt).toFixed(2)}`);
    return parts.length > 0 ? parts.join(', ') : null;
  }

  /** The response status line and headers are about to leave. */
  responding(): void {
    this.#firstByteAt ??= this.#clock.now();
  }

  succeeded(usage: Usage | null, status = 200): void {
    this.#end ??= { outcome: 'success', status, usage, fault: null };
  }

  /** The client went away mid-response: charged for what was produced up to then. */
  aborted(usage: Usage | null): void {
    this.#charged(usage, 'client closed the connection mid-response');
  }

  /**
   * The response ran into the call's deadline and was cut: charged as an abort is, for what was produced up to
   * then. The length that ran out is the caller's — the output it asked for, or the pace at which it read (a
   * client reading slowly holds the relay) — and the upstream bills us for every token it streamed. Not charging
   * it made any output free to a client that read slowly enough.
   */
  cutAtDeadline(usage: Usage | null): void {
    this.#charged(usage, "cut off at the call's deadline mid-response");
  }

  /** A response that ended early on the caller's account: `client_aborted`, charged for what was produced. */
  #charged(usage: Usage | null, detail: string): void {
    this.#end ??= {
      outcome: 'client_aborted',
      status: 200,
      usage,
      fault: { kind: 'client', status: null, detail },
    };
  }

  /** The upstream broke after the first byte reached the client; not charged. */
  interrupted(error: unknown, usage: Usage | null): void {
    const kind = error instanceof UpstreamFailure ? error.kind : 'internal';
    const detail = error instanceof Error ? error.message : 'stream interrupted';
    this.#end ??= {
      outcome: 'stream_interrupted',
      status: 200,
      usage,
      fault: { kind, status: null, detail },
    };
  }

  failed(error: unknown): void {
    if (this.#end) return;
    const { outcome, status, fault } = classifyError(error);
    this.#end = { outcome, status, usage: null, fault };
  }

  /**
   * What records the outcome if the response body is never read. A streamed body records it as it is read;
   * when the client hangs up before the response begins, the runtime never reads it (http/relay-body.ts).
   */
  onUnread(record: () => void): void {
    this.#unread = record;
  }

  /** The invocation is over: a body never read records its outcome now. */
  closeUnread(): void {
    const unread = this.#unread;
    this.#unread = null;
    if (this.#end === null) unread?.();
  }

  get ended(): boolean {
    return this.#end !== null;
  }

  settlement(): SettlementRecord {
    const end = this.#end ?? {
      outcome: 'internal_error' as const,
      status: 500,
      usage: null,
      fault: { kind: 'internal' as const, status: 500, detail: 'call ended without an outcome' },
    };
    const charged = isCharged(end.outcome);
    const cost = charged && end.usage && this.model ? costOf(this.model, end.usage) : 0;
    const now = this.#clock.now();
    return {
      v: 1,
      id: this.requestId,
      requestId: this.requestId,
      endpoint: this.endpoint,
      accountId: this.principal?.accountId ?? null,
      keyPrefix: this.principal?.keyPrefix ?? null,
      model: this.model?.id ?? null,
      deployment: this.deployment?.id ?? null,
      provider: this.deployment?.provider ?? null,
      stream: this.stream,
      status: end.status,
      outcome: end.outcome,
      usage: end.usage,
      cost,
      admission: this.admission,
      fault: end.fault,
      attempts: this.attempts,
      timings: {
        receivedAt: this.receivedAt,
        firstByteMs: this.#firstByteAt === null ? null : this.#firstByteAt - this.receivedAt,
        totalMs: now - this.receivedAt,
        admissionMs: this.admissionMs,
        upstreamMs: this.upstreamMs,
      },
    };
  }
}
