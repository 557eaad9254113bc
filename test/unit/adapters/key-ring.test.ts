import { describe, expect, it } from 'vitest';
import { KeyRing, REREAD_REFUSED_KEY_MS } from '#adapters/upstream/key-ring.ts';
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
});
