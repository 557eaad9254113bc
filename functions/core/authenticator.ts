import { bearerKey, isWellFormedKey } from './api-keys.ts';
import { AuthenticationError } from './errors.ts';
import type { ApiKeyRecord, Clock, KeyStore } from './ports.ts';

export interface Principal {
  readonly accountId: string;
  readonly keyPrefix: string;
}

export interface AuthenticatorOptions {
  readonly keys: KeyStore;
  readonly clock: Clock;
  /** SHA-256 hex of the key; injected so core stays free of node:crypto. */
  readonly hash: (key: string) => string;
  /**
   * How long a lookup (hit or miss) is trusted without asking the store again. After it, the next request
   * triggers a refresh; a revocation therefore takes effect within `ttlMs` plus one store round trip.
   */
  readonly ttlMs: number;
  /** Oldest a cached answer may be and still be served while its refresh is under way (0 with a 0 TTL). */
  readonly maxStaleMs?: number;
  readonly maxEntries?: number;
}

interface CacheEntry {
  readonly record: ApiKeyRecord | null;
  readonly fetchedAt: number;
}

/**
 * Turns an `Authorization` header into a principal. Lookups are cached per instance, misses included, so a
 * flood of bad keys costs one store read per key per TTL. Concurrent lookups of one key share a single store
 * read, and an expired entry keeps answering while it is refreshed in the background: when the cache expires
 * under load, no request waits for the store and the store sees one read, not one per request.
 */
export class Authenticator {
  readonly #options: AuthenticatorOptions;
  readonly #cache = new Map<string, CacheEntry>();
  readonly #inFlight = new Map<string, Promise<ApiKeyRecord | null>>();
  readonly #maxEntries: number;
  readonly #maxStaleMs: number;

  constructor(options: AuthenticatorOptions) {
    this.#options = options;
    this.#maxEntries = options.maxEntries ?? 10_000;
    // A TTL of 0 turns caching off entirely: every request asks the store.
    this.#maxStaleMs = options.ttlMs === 0 ? 0 : (options.maxStaleMs ?? Math.max(60_000, options.ttlMs * 4));
  }

  async authenticate(authorization: string | undefined): Promise<Principal> {
    const key = bearerKey(authorization);
    // Malformed keys never reach the store.
    if (key === null || !isWellFormedKey(key)) throw new AuthenticationError();
    const record = await this.#lookup(this.#options.hash(key));
    if (record === null || record.revoked) throw new AuthenticationError();
    return { accountId: record.accountId, keyPrefix: record.prefix };
  }

  #lookup(hash: string): Promise<ApiKeyRecord | null> | ApiKeyRecord | null {
    const cached = this.#cache.get(hash);
    const age = cached ? this.#options.clock.now() - cached.fetchedAt : Number.POSITIVE_INFINITY;
    if (cached && age < this.#options.ttlMs) return cached.record;
    const refresh = this.#refresh(hash);
    if (cached && age < this.#maxStaleMs) {
      // A failed background refresh must not become an unhandled rejection; the next request retries it.
      refresh.catch(() => {});
      return cached.record;
    }
    return refresh;
  }

  #refresh(hash: string): Promise<ApiKeyRecord | null> {
    let pending = this.#inFlight.get(hash);
    if (pending) return pending;
    pending = this.#options.keys
      .findByHash(hash)
      .then((record) => {
        this.#remember(hash, record);
        return record;
      })
      .finally(() => this.#inFlight.delete(hash));
    this.#inFlight.set(hash, pending);
    return pending;
  }

  #remember(hash: string, record: ApiKeyRecord | null): void {
    this.#cache.delete(hash);
    if (this.#cache.size >= this.#maxEntries) {
      // Maps iterate in insertion order: dropping the first entry evicts the least recently refreshed.
      const oldest = this.#cache.keys().next();
      if (!oldest.done) this.#cache.delete(oldest.value);
    }
    this.#cache.set(hash, { record, fetchedAt: this.#options.clock.now() });
  }
}
