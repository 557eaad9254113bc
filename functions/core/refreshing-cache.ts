import type { Clock } from './ports.ts';

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
 * A per-instance cache in front of a store. Concurrent loads of one key share a single store read, and an
 * expired value keeps answering while it is refreshed in the background — so when entries expire under load,
 * no request waits for the store and the store sees one read, not one per request. The staleness bound is
 * therefore `ttlMs` plus one store round trip.
 */
export class RefreshingCache<V> {
  readonly #options: RefreshingCacheOptions<V>;
  readonly #entries = new Map<string, Entry<V>>();
  readonly #loading = new Map<string, Promise<V>>();
  readonly #maxEntries: number;
  readonly #maxStaleMs: number;

  constructor(options: RefreshingCacheOptions<V>) {
    this.#options = options;
    this.#maxEntries = options.maxEntries ?? 10_000;
    // Oldest a value may be and still be served while its refresh is under way.
    this.#maxStaleMs = options.ttlMs === 0 ? 0 : Math.max(60_000, options.ttlMs * 4);
  }

  /** The value, from the cache when fresh enough; synchronous on a hit so hot paths add no microtask. */
  get(key: string): V | Promise<V> {
    const entry = this.#entries.get(key);
    const age = entry ? this.#options.clock.now() - entry.loadedAt : Number.POSITIVE_INFINITY;
    if (entry && age < this.#options.ttlMs) return entry.value;
    const refresh = this.#refresh(key);
    if (entry && age < this.#maxStaleMs) {
      // A failed background refresh must not become an unhandled rejection; the next request retries it.
      refresh.catch(() => {});
      return entry.value;
    }
    return refresh;
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
    this.#entries.delete(key);
    if (this.#entries.size >= this.#maxEntries) {
      // Maps iterate in insertion order: dropping the first entry evicts the least recently loaded.
      const oldest = this.#entries.keys().next();
      if (!oldest.done) this.#entries.delete(oldest.value);
    }
    this.#entries.set(key, { value, loadedAt: this.#options.clock.now() });
  }
}
