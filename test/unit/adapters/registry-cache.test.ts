import { describe, expect, it } from 'vitest';
import { type DynamoRegistry, RegistryCache } from '#adapters/dynamo-registry.ts';
import { chatModel, manualClock } from '#test/fixtures.ts';

/** A registry whose models the test swaps, counting its loads. */
const fakeRegistry = () => {
  const state = { loads: 0, ids: ['famA-1'], fail: false };
  const registry = {
    load: async () => {
      state.loads++;
      if (state.fail) throw new Error('store down');
      return { models: state.ids.map((id) => chatModel({ id })), deployments: [], invalid: [] };
    },
  } as unknown as DynamoRegistry;
  return { registry, state };
};

const silent = { debug() {}, info() {}, warn() {}, error() {} } as never;
const ids = async (cache: RegistryCache) => [...(await cache.catalog()).models.keys()];

describe('the registry snapshot', () => {
  it('serves a snapshot past its age while one refresh runs, so steady traffic never waits', async () => {
    const { registry, state } = fakeRegistry();
    const clock = manualClock();
    const cache = new RegistryCache(registry, clock, 15_000, silent, 0.2);
    expect(await ids(cache)).toEqual(['famA-1']);
    state.ids = ['famA-2'];
    clock.advance(20_000);
    expect(await ids(cache)).toEqual(['famA-1']);
    await new Promise((resolve) => setImmediate(resolve));
    expect(await ids(cache)).toEqual(['famA-2']);
    expect(state.loads).toBe(2);
  });

  it('waits for the reload past twice its age: a retired model or a new price is not served after an idle spell', async () => {
    const { registry, state } = fakeRegistry();
    const clock = manualClock();
    const cache = new RegistryCache(registry, clock, 15_000, silent, 0.2);
    await cache.catalog();
    state.ids = ['famA-2'];
    clock.advance(31_000);
    expect(await ids(cache)).toEqual(['famA-2']);
    // When that reload fails, the old snapshot serves (admission fails closed on its own if the store is down).
    state.fail = true;
    clock.advance(31_000);
    expect(await ids(cache)).toEqual(['famA-2']);
  });
});
