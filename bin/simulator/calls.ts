/** A bounded log of the API calls the simulator received, for assertions in tests. */

/** One recorded API call. */
export interface SimCall {
  /** Provider segment of `/p/<provider>/v1/...`, or `default` for plain `/v1/...`. */
  provider: string;
  /** API path without the provider prefix, e.g. `/v1/chat/completions`. */
  path: string;
  /** Requested model, or `''` when the body had none (e.g. invalid JSON). */
  model: string;
  /** API key sent by the client (bearer, or `x-api-key` on the Messages API); null when missing. */
  key: string | null;
  stream: boolean;
  /** The injected error behaviour, or null for a normal response. */
  fault: string | null;
  /** Arrival time in epoch milliseconds. */
  at: number;
  /** The parsed JSON body of a well-formed request (null otherwise), to check what a gateway sent. */
  body: unknown;
}

/** Default number of calls kept; older calls are forgotten first. */
export const DEFAULT_CALL_LOG_CAPACITY = 1000;

/** Ring buffer of the most recent calls, so a long benchmark run cannot grow memory without bound. */
export class CallLog {
  readonly #capacity: number;
  readonly #ring: SimCall[] = [];
  #next = 0;

  constructor(capacity: number = DEFAULT_CALL_LOG_CAPACITY) {
    this.#capacity = capacity;
  }

  /** Appends a call, evicting the oldest once full. */
  record(call: SimCall): void {
    if (this.#ring.length < this.#capacity) this.#ring.push(call);
    else this.#ring[this.#next] = call;
    this.#next = (this.#next + 1) % this.#capacity;
  }

  /** Recorded calls, oldest first and newest last, optionally only those of one provider. */
  list(provider?: string): SimCall[] {
    const ordered =
      this.#ring.length < this.#capacity
        ? this.#ring.slice()
        : [...this.#ring.slice(this.#next), ...this.#ring.slice(0, this.#next)];
    return provider === undefined ? ordered : ordered.filter((call) => call.provider === provider);
  }

  /** Forgets every call. */
  clear(): void {
    this.#ring.length = 0;
    this.#next = 0;
  }
}
