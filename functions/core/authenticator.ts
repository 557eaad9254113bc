import { bearerKey, isWellFormedKey } from './api-keys.ts';
import { AuthenticationError, ServiceUnavailableError } from './errors.ts';
import type { ApiKeyRecord, Clock, KeyStore } from './ports.ts';
import { RefreshingCache } from './refreshing-cache.ts';

export interface Principal {
  readonly accountId: string;
  readonly keyPrefix: string;
}

export interface AuthenticatorOptions {
  readonly keys: KeyStore;
  readonly clock: Clock;
  /** SHA-256 hex of the key; injected so core stays free of node:crypto. */
  readonly hash: (key: string) => string;
  /** How long a lookup (hit or miss) is trusted; a revocation takes effect within it plus one lookup. */
  readonly ttlMs: number;
  readonly maxEntries?: number;
}

/** The 401's message when a call carries no key (OpenAI's words, with our key format). */
const NO_KEY =
  "You didn't provide an API key. Pass it in an Authorization header using Bearer auth " +
  '("Authorization: Bearer svc_live_…").';

/**
 * Turns an `Authorization` header into a principal. Lookups are cached per instance, misses included, so a
 * flood of bad keys costs one store read per key per TTL (see RefreshingCache for how expiry behaves under
 * load). When the store cannot be reached and nothing usable is cached, the request is refused with 503:
 * never let an unverified caller through.
 */
export class Authenticator {
  readonly #hash: (key: string) => string;
  readonly #cache: RefreshingCache<ApiKeyRecord | null>;

  constructor(options: AuthenticatorOptions) {
    this.#hash = options.hash;
    this.#cache = new RefreshingCache({
      load: (hash) => options.keys.findByHash(hash),
      clock: options.clock,
      ttlMs: options.ttlMs,
      ...(options.maxEntries ? { maxEntries: options.maxEntries } : {}),
    });
  }

  async authenticate(authorization: string | undefined): Promise<Principal> {
    // No Authorization header at all is said as such, as OpenAI says it: it tells nothing of any key.
    if (authorization === undefined || authorization.trim() === '') throw new AuthenticationError(NO_KEY);
    const key = bearerKey(authorization);
    // Malformed keys never reach the store.
    if (key === null || !isWellFormedKey(key)) throw new AuthenticationError();
    let record: ApiKeyRecord | null;
    try {
      record = await this.#cache.get(this.#hash(key));
    } catch (error) {
      throw new ServiceUnavailableError(
        'The account store is unreachable; the request was not served.',
        error,
        'accounting',
      );
    }
    if (record === null || record.revoked) throw new AuthenticationError();
    return { accountId: record.accountId, keyPrefix: record.prefix };
  }
}
