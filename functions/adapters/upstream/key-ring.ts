import { UpstreamFailure } from '#core/fallback.ts';
import type { Deployment } from '#core/registry.ts';
import type { SecretResolver } from '../secrets.ts';

/**
 * How long a key stays cached after the upstream refused it, before its secret is read again: a rotated key takes
 * effect this soon on a warm instance, and a key that is simply wrong costs one secret read a minute, not one a call.
 */
export const REREAD_REFUSED_KEY_MS = 60_000;

/**
 * A deployment's upstream keys, resolved from their secret references on first use and cached for the
 * life of the instance — until the upstream refuses one (`refused`): the operator may have rotated it.
 * Which key a call uses is core's decision (`keyIndex`, see core/fallback.ts).
 */
export class KeyRing {
  readonly #secrets: SecretResolver;
  readonly #now: () => number;
  readonly #resolved = new Map<string, { readonly value: Promise<string>; readonly at: number }>();

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
    let value = this.#resolved.get(ref)?.value;
    if (value === undefined) {
      const resolving = this.#secrets.resolve(ref);
      this.#resolved.set(ref, { value: resolving, at: this.#now() });
      // A failed resolution is not cached, so a secret added later is picked up (this read only: a refusal may
      // have let a newer one replace it).
      resolving.catch(() => {
        if (this.#resolved.get(ref)?.value === resolving) this.#resolved.delete(ref);
      });
      value = resolving;
    }
    try {
      return await value;
    } catch (error) {
      throw new UpstreamFailure('auth', `deployment ${deployment.id}: upstream key unavailable`, {
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
