/**
 * Closed-loop load against one target: C workers, each sending its next request as soon as the previous
 * response has been read to the end. Requests go through undici's low-level `dispatch()` with one reusable
 * handler object per worker, so the generator allocates almost nothing per request beyond undici's own
 * bookkeeping, and sees each body chunk the moment the parser hands it over (no stream in between).
 */
import type { Dispatcher } from 'undici';
import { Pool } from 'undici';
import { Samples } from './stats.ts';

/** Something to send requests to; the benchmark compares every target with the first one. */
export interface Target {
  readonly name: string;
  /** Full URL of the chat-completions endpoint. */
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  /** Response headers every successful response must carry (e.g. which provider served it). */
  readonly expectHeaders?: Readonly<Record<string, string>>;
}

/** A target with its keep-alive connection pool. */
export interface Endpoint {
  readonly target: Target;
  readonly pool: Pool;
  readonly path: string;
}

export const openEndpoint = (target: Target, connections: number): Endpoint => {
  const url = new URL(target.url);
  return {
    target,
    path: url.pathname + url.search,
    pool: new Pool(url.origin, {
      connections,
      pipelining: 1,
      keepAliveTimeout: 60_000,
      keepAliveMaxTimeout: 60_000,
    }),
  };
};

export interface RoundOptions {
  /** Request body, sent as is (the same bytes to every target). */
  readonly body: Buffer;
  /** Streamed (SSE) requests: time the first `data:` event and require `[DONE]`. */
  readonly stream: boolean;
  readonly concurrency: number;
  /** Workers start no new request after this long; requests in flight are still awaited. */
  readonly durationMs: number;
  /** Per-request headers/body timeout; a round can therefore never hang. */
  readonly requestTimeoutMs?: number;
}

export interface RoundResult {
  readonly target: string;
  readonly durationMs: number;
  /** Time until the last in-flight request finished. */
  readonly elapsedMs: number;
  /** Successful requests (all of them, including those that ended after the window). */
  readonly requests: number;
  /** Successful requests that ended within the window: the throughput numerator. */
  readonly completedInWindow: number;
  readonly errors: number;
  /** The first few error descriptions. */
  readonly errorSamples: readonly string[];
  /** Response body bytes of successful requests. */
  readonly bytes: number;
  /** Request start to end of body, ms. */
  readonly latency: Samples;
  /** Request start to first `data:` event of the body, ms (streams only). */
  readonly ttfb: Samples | null;
  /** The gateway's own admission round trip per request (`Server-Timing: admit;dur=…`), when it reports one. */
  readonly admit: Samples;
  /**
   * Per request whose upstream call ran beside its admission (`Server-Timing: admit-wait;dur=…`, ADR 0011): how
   * long the upstream's answer then waited for the hold — what admission added to the request.
   */
  readonly admitWait: Samples;
  /** The gateway's upstream call per request (`Server-Timing: upstream;dur=…`), non-stream responses only. */
  readonly upstream: Samples;
  /**
   * Per non-stream request that reports an upstream call: its latency minus that call and what admission added
   * (its whole round trip, or with the two overlapped the wait for the hold) — the gateway's own work plus the
   * two hops between this client and the gateway.
   */
  readonly beside: Samples;
  /**
   * Per non-stream request: what the client waited beyond the handler's own share (`Server-Timing: handler;dur=…`,
   * from the handler taking the call to its response starting) — the way in and out through the function's host.
   */
  readonly outside: Samples;
}

const DATA = Buffer.from('data:');
const DONE = Buffer.from('data: [DONE]');
const MAX_ERROR_SAMPLES = 5;

class Round {
  readonly pool: Pool;
  readonly options: Dispatcher.DispatchOptions;
  readonly stream: boolean;
  readonly expect: readonly (readonly [string, string])[];
  readonly started: number;
  readonly deadline: number;
  readonly latency = new Samples(16_384);
  readonly ttfb: Samples | null;
  readonly admit = new Samples(16_384);
  readonly admitWait = new Samples(16_384);
  readonly upstream = new Samples(16_384);
  readonly beside = new Samples(16_384);
  readonly outside = new Samples(16_384);
  requests = 0;
  completedInWindow = 0;
  errors = 0;
  readonly errorSamples: string[] = [];
  bytes = 0;
  #running: number;
  readonly #done: () => void;

  constructor(endpoint: Endpoint, options: RoundOptions, done: () => void) {
    this.pool = endpoint.pool;
    const timeout = options.requestTimeoutMs ?? 30_000;
    this.options = {
      path: endpoint.path,
      method: 'POST',
      headers: { ...endpoint.target.headers, 'content-type': 'application/json' },
      body: options.body,
      headersTimeout: timeout,
      bodyTimeout: timeout,
    };
    this.stream = options.stream;
    this.expect = Object.entries(endpoint.target.expectHeaders ?? {}).map(
      ([k, v]) => [k.toLowerCase(), v] as const,
    );
    this.ttfb = options.stream ? new Samples(16_384) : null;
    this.#running = options.concurrency;
    this.#done = done;
    this.started = performance.now();
    this.deadline = this.started + options.durationMs;
  }

  fail(description: string): void {
    this.errors++;
    if (this.errorSamples.length < MAX_ERROR_SAMPLES) this.errorSamples.push(description);
  }

  workerFinished(): void {
    if (--this.#running === 0) this.#done();
  }
}

/** One closed-loop worker; the same object is the undici handler of each of its requests in turn. */
class Worker implements Dispatcher.DispatchHandler {
  readonly #round: Round;
  readonly #next: () => void;
  #start = 0;
  #first = 0;
  #status = 0;
  #bytes = 0;
  #sawDone = false;
  #headerMismatch: string | null = null;
  #admitMs = -1;
  #admitWaitMs = -1;
  #upstreamMs = -1;
  #handlerMs = -1;

  constructor(round: Round) {
    this.#round = round;
    this.#next = () => this.send();
  }

  send(): void {
    const round = this.#round;
    if (performance.now() >= round.deadline) {
      round.workerFinished();
      return;
    }
    this.#first = 0;
    this.#status = 0;
    this.#bytes = 0;
    this.#sawDone = false;
    this.#headerMismatch = null;
    this.#admitMs = -1;
    this.#admitWaitMs = -1;
    this.#upstreamMs = -1;
    this.#handlerMs = -1;
    this.#start = performance.now();
    round.pool.dispatch(round.options, this);
  }

  onRequestStart(): void {}

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    this.#status = statusCode;
    const timing = headers['server-timing'];
    if (typeof timing === 'string') {
      this.#admitMs = timingEntry(timing, 'admit');
      this.#admitWaitMs = timingEntry(timing, 'admit-wait');
      this.#upstreamMs = timingEntry(timing, 'upstream');
      this.#handlerMs = timingEntry(timing, 'handler');
    }
    for (const [name, value] of this.#round.expect) {
      if (headers[name] !== value)
        this.#headerMismatch = `${name}: ${String(headers[name])} (expected ${value})`;
    }
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#bytes += chunk.length;
    if (this.#round.stream) {
      if (this.#first === 0 && chunk.indexOf(DATA) !== -1) this.#first = performance.now();
      if (!this.#sawDone && chunk.indexOf(DONE) !== -1) this.#sawDone = true;
    }
  }

  onResponseEnd(): void {
    const end = performance.now();
    const round = this.#round;
    if (this.#status !== 200) round.fail(`HTTP ${this.#status}`);
    else if (this.#headerMismatch !== null) round.fail(`unexpected header ${this.#headerMismatch}`);
    else if (this.#bytes === 0) round.fail('empty body');
    else if (round.stream && (this.#first === 0 || !this.#sawDone))
      round.fail('stream ended without data: [DONE]');
    else {
      round.requests++;
      if (end <= round.deadline) round.completedInWindow++;
      round.bytes += this.#bytes;
      round.latency.push(end - this.#start);
      round.ttfb?.push(this.#first - this.#start);
      if (this.#admitMs >= 0) round.admit.push(this.#admitMs);
      if (this.#admitWaitMs >= 0) round.admitWait.push(this.#admitWaitMs);
      // A stream's Server-Timing leaves with its headers, before the upstream call has ended.
      if (this.#upstreamMs >= 0 && !round.stream) {
        round.upstream.push(this.#upstreamMs);
        const admitted = this.#admitWaitMs >= 0 ? this.#admitWaitMs : Math.max(0, this.#admitMs);
        round.beside.push(end - this.#start - this.#upstreamMs - admitted);
      }
      if (this.#handlerMs >= 0 && !round.stream) round.outside.push(end - this.#start - this.#handlerMs);
    }
    queueMicrotask(this.#next);
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, error: Error): void {
    const code = (error as { code?: unknown }).code;
    this.#round.fail(`${error.name}${typeof code === 'string' ? ` ${code}` : ''}: ${error.message}`);
    queueMicrotask(this.#next);
  }
}

/** A `Server-Timing` entry's duration in ms (`name;dur=1.23`), or -1 when the header has none. */
const timingEntry = (header: string, name: string): number => {
  const at = header.indexOf(`${name};dur=`);
  return at === -1 ? -1 : Number.parseFloat(header.slice(at + name.length + 5));
};

/** Runs one closed-loop round against `endpoint` and resolves once every worker has stopped. */
export const runRound = (endpoint: Endpoint, options: RoundOptions): Promise<RoundResult> =>
  new Promise((resolve) => {
    const round: Round = new Round(endpoint, options, () =>
      resolve({
        target: endpoint.target.name,
        durationMs: options.durationMs,
        elapsedMs: performance.now() - round.started,
        requests: round.requests,
        completedInWindow: round.completedInWindow,
        errors: round.errors,
        errorSamples: round.errorSamples,
        bytes: round.bytes,
        latency: round.latency,
        ttfb: round.ttfb,
        admit: round.admit,
        admitWait: round.admitWait,
        upstream: round.upstream,
        beside: round.beside,
        outside: round.outside,
      }),
    );
    for (let i = 0; i < options.concurrency; i++) new Worker(round).send();
  });
