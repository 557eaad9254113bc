import type { Clock } from './ports.ts';
import { setMostRecent } from './recency.ts';

export interface RefreshingCacheOptions<V> {
  readonly load: (key: string) => Promise<V>;
  readonly clock: Clock;
  /** How long a loaded value is trusted without asking again; 0 turns caching off. */
  readonly ttlMs: number;
  readonly maxEntries?: number;
}

interface Entry<V> {
  readonly value: V;
  readonly loadedAt: number;
}

/**
 * A per-instance cache in front of a store. Concurrent loads of one key share a single store read. A value is
 * refreshed in the background from half its lifetime on, so under steady use no request waits for the store;
 * it is never served past `ttlMs` — a revoked key, a new tier, must not outlive the documented bound because
 * the key went unused for a while (serving an expired value while refreshing let a revoked key through on its
 * first use after an idle minute). The staleness bound is `ttlMs` plus one store round trip.
 */
export class RefreshingCache<V> {
  readonly #options: RefreshingCacheOptions<V>;
  readonly #entries = new Map<string, Entry<V>>();
  readonly #loading = new Map<string, Promise<V>>();
  readonly #maxEntries: number;

  constructor(options: RefreshingCacheOptions<V>) {
    this.#options = options;
    this.#maxEntries = options.maxEntries ?? 10_000;
  }

  /** The value, from the cache when fresh enough; synchronous on a hit so hot paths add no microtask. */
  get(key: string): V | Promise<V> {
    const entry = this.#entries.get(key);
    const age = entry ? this.#options.clock.now() - entry.loadedAt : Number.POSITIVE_INFINITY;
    if (entry && age < this.#options.ttlMs) {
      // A failed background refresh must not become an unhandled rejection; the next request retries it.
      if (age >= this.#options.ttlMs / 2) this.#refresh(key).catch(() => {});
      return entry.value;
    }
    return this.#refresh(key);
  }

  /** The value loaded again now, whatever the cache holds: for a caller that learnt the cached one is stale. */
  reload(key: string): Promise<V> {
    return this.#refresh(key);
  }

  #refresh(key: string): Promise<V> {
    let pending = this.#loading.get(key);
    if (pending) return pending;
    pending = this.#options
      .load(key)
      .then((value) => {
        this.#remember(key, value);
        return value;
      })
      .finally(() => this.#loading.delete(key));
    this.#loading.set(key, pending);
    return pending;
  }

  #remember(key: string, value: V): void {
    // Past maxEntries the least recently loaded entry goes.
    setMostRecent(this.#entries, key, { value, loadedAt: this.#options.clock.now() }, this.#maxEntries);
  }
}
