import { UpstreamFailure } from '#core/fallback.ts';
import type { Deployment } from '#core/registry.ts';
import type { SecretResolver } from '../secrets.ts';

/**
 * A deployment's upstream keys, resolved from their secret references on first use and cached for the
 * life of the instance. Which key a call uses is core's decision (`keyIndex`, see core/fallback.ts).
 */
export class KeyRing {
  readonly #secrets: SecretResolver;
  readonly #resolved = new Map<string, Promise<string>>();

  constructor(secrets: SecretResolver) {
    this.#secrets = secrets;
  }

  /** The key at `keyIndex`, or null for deployments without keys (e.g. a local vLLM). */
  async key(deployment: Deployment, keyIndex: number): Promise<string | null> {
    const refs = deployment.keyRefs;
    if (refs.length === 0) return null;
    const ref = refs[keyIndex % refs.length] as string;
    let value = this.#resolved.get(ref);
    if (value === undefined) {
      value = this.#secrets.resolve(ref);
      this.#resolved.set(ref, value);
      // A failed resolution is not cached, so a secret added later is picked up.
      value.catch(() => this.#resolved.delete(ref));
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
