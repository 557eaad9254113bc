import { describe, expect, it } from 'vitest';
import {
  KeyRing,
  REREAD_FAILED_READ_MS,
  REREAD_REFUSED_KEY_MS,
  REREAD_UNAVAILABLE_KEY_MS,
} from '#adapters/upstream/key-ring.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import { deployment } from '#test/fixtures.ts';

/** A secret store whose value the test rotates, counting its reads. */
const rotatingSecrets = () => {
  const store = { value: 'old-key', reads: 0 };
  return {
    store,
    resolver: {
      resolve: async () => {
        store.reads++;
        return store.value;
      },
    },
  };
};

describe('KeyRing', () => {
  const keyed = deployment({ keyRefs: ['secretsmanager:upstream-a', 'secretsmanager:upstream-b'] });

  it('reads each secret once while the upstream takes its key', async () => {
    const { store, resolver } = rotatingSecrets();
    const ring = new KeyRing(resolver, () => 0);
    for (let i = 0; i < 5; i++) expect(await ring.key(keyed, 0)).toBe('old-key');
    expect(store.reads).toBe(1);
  });

  it('reads a refused key again once it has been cached a minute: a rotation reaches a warm instance', async () => {
    const { store, resolver } = rotatingSecrets();
    let now = 0;
    const ring = new KeyRing(resolver, () => now);
    expect(await ring.key(keyed, 0)).toBe('old-key');
    store.value = 'new-key';
    // Refused at once after being read: kept, so a wrong key costs a secret read a minute, not one a call.
    ring.refused(keyed, 0);
    expect(await ring.key(keyed, 0)).toBe('old-key');
    now += REREAD_REFUSED_KEY_MS;
    ring.refused(keyed, 0);
    expect(await ring.key(keyed, 0)).toBe('new-key');
    expect(store.reads).toBe(2);
  });

  it('forgets only the refused key, not the deployment’s others', async () => {
    const { store, resolver } = rotatingSecrets();
    let now = 0;
    const ring = new KeyRing(resolver, () => now);
    await ring.key(keyed, 0);
    await ring.key(keyed, 1);
    now += REREAD_REFUSED_KEY_MS;
    ring.refused(keyed, 1);
    await ring.key(keyed, 0);
    expect(store.reads).toBe(2);
    await ring.key(keyed, 1);
    expect(store.reads).toBe(3);
  });

  it('keeps a secret it could not read unread for a while, then reads it again: one added later is picked up', async () => {
    let reads = 0;
    let value: string | null = null;
    const resolver = {
      resolve: async (ref: string) => {
        reads++;
        if (value === null)
          throw new Error(`Secret reference ${ref} points at an unset environment variable`);
        return value;
      },
    };
    let now = 0;
    const ring = new KeyRing(resolver, () => now);
    const failure = await ring.key(keyed, 0).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(UpstreamFailure);
    // No status: nothing was sent upstream. The message says why, naming the reference, never a secret.
    expect(failure).toMatchObject({ kind: 'auth', status: null });
    expect((failure as Error).message).toContain(
      'secretsmanager:upstream-a points at an unset environment variable',
    );
    // Every call meanwhile fails at once, without reading the secret again (a failed Secrets Manager read takes time).
    value = 'added-key';
    now += REREAD_UNAVAILABLE_KEY_MS - 1;
    await expect(ring.key(keyed, 0)).rejects.toBeInstanceOf(UpstreamFailure);
    expect(reads).toBe(1);
    now += 1;
    expect(await ring.key(keyed, 0)).toBe('added-key');
    expect(reads).toBe(2);
    // Once read, it stays.
    now += REREAD_UNAVAILABLE_KEY_MS;
    expect(await ring.key(keyed, 0)).toBe('added-key');
    expect(reads).toBe(2);
  });

  it('reads a secret again soon after a read that failed on the way (throttled): the next likely succeeds', async () => {
    let reads = 0;
    const resolver = {
      resolve: async () => {
        reads++;
        if (reads === 1)
          throw Object.assign(new Error('Rate exceeded'), {
            name: 'ThrottlingException',
            $retryable: { throttling: true },
          });
        return 'the-key';
      },
    };
    let now = 0;
    const ring = new KeyRing(resolver, () => now);
    await expect(ring.key(keyed, 0)).rejects.toBeInstanceOf(UpstreamFailure);
    now += REREAD_FAILED_READ_MS - 1;
    await expect(ring.key(keyed, 0)).rejects.toBeInstanceOf(UpstreamFailure);
    expect(reads).toBe(1);
    now += 1;
    expect(await ring.key(keyed, 0)).toBe('the-key');
    expect(REREAD_FAILED_READ_MS).toBeLessThan(REREAD_UNAVAILABLE_KEY_MS);
  });
});
