import { UpstreamFailure } from '#core/fallback.ts';
import type { Deployment } from '#core/registry.ts';
import type { SecretResolver } from '../secrets.ts';
import { isTransient } from '../transient-errors.ts';

/**
 * How long a key stays cached after the upstream refused it, before its secret is read again: a rotated key takes
 * effect this soon on a warm instance, and a key that is simply wrong costs one secret read a minute, not one a call.
 */
export const REREAD_REFUSED_KEY_MS = 60_000;

/**
 * How long a secret that could not be read (unset, missing, no access) stays unread: each call would otherwise read
 * it again, and a Secrets Manager call that fails can take a fifth of a second, every call. A secret added later is
 * picked up this soon.
 */
export const REREAD_UNAVAILABLE_KEY_MS = 30_000;

/**
 * …and one whose read failed on the way (throttled, timed out, Secrets Manager's own fault): read again this soon —
 * the next read likely succeeds, and a deployment with one key would otherwise fail every call for the long wait.
 */
export const REREAD_FAILED_READ_MS = 1_000;

/**
 * A deployment's upstream keys, resolved from their secret references on first use and cached for the
 * life of the instance — until the upstream refuses one (`refused`): the operator may have rotated it — and a read
 * that failed for REREAD_FAILED_READ_MS or REREAD_UNAVAILABLE_KEY_MS. Which key a call uses is core's decision
 * (`keyIndex`, see core/fallback.ts).
 */
export class KeyRing {
  readonly #secrets: SecretResolver;
  readonly #now: () => number;
  /** `rereadAt`: when a failed read may be made again (never, while it has not failed). */
  readonly #resolved = new Map<
    string,
    { readonly value: Promise<string>; readonly at: number; rereadAt: number }
  >();

  constructor(secrets: SecretResolver, now: () => number = Date.now) {
    this.#secrets = secrets;
    this.#now = now;
  }

  /**
   * The upstream answered 401 or 403 to the key at `keyIndex`: the secret is read again on a later call once the
   * key has been cached REREAD_REFUSED_KEY_MS. A redeploy without changes replaces no instance, so this is how a
   * warm instance learns of a rotation.
   */
  refused(deployment: Deployment, keyIndex: number): void {
    const ref = refOf(deployment, keyIndex);
    if (ref === null) return;
    const cached = this.#resolved.get(ref);
    if (cached && this.#now() - cached.at >= REREAD_REFUSED_KEY_MS) this.#resolved.delete(ref);
  }

  /** The key at `keyIndex`, or null for deployments without keys (e.g. a local vLLM). */
  async key(deployment: Deployment, keyIndex: number): Promise<string | null> {
    const ref = refOf(deployment, keyIndex);
    if (ref === null) return null;
    let cached = this.#resolved.get(ref);
    // A failed read is kept a while, then read again: a secret added later is picked up.
    if (cached === undefined || cached.rereadAt <= this.#now()) {
      const entry = {
        value: this.#secrets.resolve(ref),
        at: this.#now(),
        rereadAt: Number.POSITIVE_INFINITY,
      };
      this.#resolved.set(ref, entry);
      entry.value.catch((error: unknown) => {
        entry.rereadAt =
          this.#now() + (isTransient(error) ? REREAD_FAILED_READ_MS : REREAD_UNAVAILABLE_KEY_MS);
      });
      cached = entry;
    }
    try {
      return await cached.value;
    } catch (error) {
      // No status: nothing was sent upstream (core/fallback.ts counts it as no upstream call).
      const reason = error instanceof Error ? `: ${error.message}` : '';
      throw new UpstreamFailure('auth', `deployment ${deployment.id}: upstream key unavailable${reason}`, {
        cause: error,
      });
    }
  }
}

/** The secret reference of the key at `keyIndex` (keys cycle), or null for a deployment without keys. */
const refOf = (deployment: Deployment, keyIndex: number): string | null => {
  const refs = deployment.keyRefs;
  return refs.length === 0 ? null : (refs[keyIndex % refs.length] as string);
};
