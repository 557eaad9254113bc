import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { costOf } from '#core/pricing.ts';
import type { Deployment, Model, Rates } from '#core/registry.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import { drainSettlements, startTestStack, type TestStack, takeSettlements } from '#test/stack.ts';

/**
 * The price floor end to end: the simulator's price list is what the providers charge us; the scheduled price
 * sync reads it into the registry; the published (listed and billed) rate is max(list, cost × 1.2).
 */
const MODEL = 'famA-v4.1-flash'; // list 0.25 in / 0.8 out per 1M
let t: TestStack;
beforeAll(async () => {
  t = await startTestStack();
});
afterAll(() => t?.stop());

const published = async (id: string) => {
  const res = await fetch(`${t.baseURL}/models/${id}`, { headers: { authorization: `Bearer ${t.apiKey}` } });
  return ((await res.json()) as { pricing: { input: number; output: number } }).pricing;
};

/** Syncs, then makes the gateway see the result now rather than at its next registry refresh. */
const sync = async () => {
  const result = await t.stack.priceSync();
  await t.stack.container.registry.refresh();
  return result;
};

/** The model as billing sees it at the given published rates. */
const atRates = (rates: Rates): Model => ({
  id: MODEL,
  family: 'famA',
  kind: 'chat',
  rates,
  flags: {},
  status: 'active',
  created: 0,
});

const billedCall = async (): Promise<SettlementRecord> => {
  await drainSettlements(t.stack);
  const res = await t.post('/chat/completions', {
    model: MODEL,
    messages: [{ role: 'user', content: 'hi' }],
  });
  expect(res.status).toBe(200);
  await res.text();
  const [record] = await takeSettlements(t.stack, 1);
  return record as SettlementRecord;
};

describe('price floor', () => {
  it('publishes list rates while upstream costs leave the minimum margin', async () => {
    const result = await sync();
    expect(result.failed).toEqual([]);
    expect(result.updated).toEqual([]); // the seeded costs are what the price lists say
    expect(result.checked).toBeGreaterThan(40);
    expect(await published(MODEL)).toMatchObject({ input: 0.25, output: 0.8 });
  });

  it('raises the published and billed rate after the next sync when a cost eats into the margin', async () => {
    // sim-b (the fallback) now charges 0.5 in / 0.7 out: floors 0.6 and 0.84, both above list.
    t.simulator.setPrices('sim-b', { [MODEL]: { input: 0.5, output: 0.7 } });
    expect(await published(MODEL)).toMatchObject({ input: 0.25, output: 0.8 }); // not before the sync
    const result = await sync();
    expect(result.updated).toEqual([`${MODEL}@sim-b`]);
    expect(result.republished).toEqual([
      { model: MODEL, before: { input: 0.25, output: 0.8 }, after: { input: 0.6, output: 0.84 } },
    ]);
    expect(await published(MODEL)).toMatchObject({ input: 0.6, output: 0.84 });

    // Billing uses the published rates, whichever deployment served (here sim-a, whose cost did not change).
    const record = await billedCall();
    const usage = record.usage as NonNullable<SettlementRecord['usage']>;
    expect(record.cost).toBe(costOf(atRates({ input: 0.6, output: 0.84 }), usage));
    expect(record.cost).toBeGreaterThan(costOf(atRates({ input: 0.25, output: 0.8 }), usage));
  });

  it('keeps that floor when an operator writes the deployment back with the cost it had (a registry file, an edit)', async () => {
    const registry = t.stack.container.registryStore;
    const sim = (await registry.load()).deployments.find((d) => d.id === `${MODEL}@sim-b`);
    expect(sim?.syncedCost).toMatchObject({ input: 0.5, output: 0.7 });
    // What `registry load` of last month's file or `deployments update` writes: the document, its old cost in it.
    await registry.put([], [{ ...(sim as Deployment), cost: { input: 0.1875, output: 0.6 }, weight: 2 }]);
    await t.stack.container.registry.refresh();
    expect(await published(MODEL)).toMatchObject({ input: 0.6, output: 0.84 });
    const after = (await registry.load()).deployments.find((d) => d.id === `${MODEL}@sim-b`);
    expect(after).toMatchObject({ weight: 2, syncedCost: { input: 0.5, output: 0.7 } });
    // A cost so far below the provider's price (over 3×) that the synced price is not trusted: the floor stands on
    // the configured cost, and the sync refuses that deployment's list until an operator raises the cost.
    await registry.put([], [{ ...(after as Deployment), cost: { input: 0.1, output: 0.6 } }]);
    await t.stack.container.registry.refresh();
    expect(await published(MODEL)).toMatchObject({ input: 0.25, output: 0.84 });
    expect((await sync()).refused).toEqual([
      {
        deployment: `${MODEL}@sim-b`,
        model: MODEL,
        rates: [{ rate: 'input', listed: 0.5, configured: 0.1, limit: 0.3 }],
      },
    ]);
    await registry.put([], [{ ...(after as Deployment), weight: 1 }]);
  });

  it('never drops the published rate below the list rate when costs fall', async () => {
    t.simulator.setPrices('sim-a', { [MODEL]: { input: 0.001, output: 0.001 } });
    t.simulator.setPrices('sim-b', { [MODEL]: { input: 0.001, output: 0.001 } });
    const result = await sync();
    expect(result.updated.sort()).toEqual([`${MODEL}@sim-a`, `${MODEL}@sim-b`]);
    expect(await published(MODEL)).toMatchObject({ input: 0.25, output: 0.8 });
    const record = await billedCall();
    expect(record.cost).toBe(
      costOf(atRates({ input: 0.25, output: 0.8 }), record.usage as NonNullable<SettlementRecord['usage']>),
    );
  });

  it('keeps a deployment’s cost when its provider’s list cannot be read, and says so', async () => {
    const registry = t.stack.container.registryStore;
    const { deployments } = await registry.load();
    const simA = deployments.find((d) => d.id === `${MODEL}@sim-a`) as (typeof deployments)[number];
    // A third provider that cannot be reached (nothing listens on port 9 of loopback), priced above list.
    const unreachable = {
      ...simA,
      id: `${MODEL}@gone`,
      provider: 'gone',
      baseUrl: 'http://127.0.0.1:9/v1',
      priority: 9,
      cost: { input: 0.5, output: 1 },
    };
    await registry.put([], [unreachable]);
    t.simulator.setPrices('sim-a', { [MODEL]: { input: 0.3, output: 0.9 } });
    try {
      const result = await sync();
      expect(result.failed).toEqual(['openai-compatible http://127.0.0.1:9/v1']);
      // The others were synced regardless, and the unreachable one's stored cost still floors the price.
      expect(result.updated).toEqual([`${MODEL}@sim-a`]);
      expect(await published(MODEL)).toMatchObject({ input: 0.6, output: 1.2 });
    } finally {
      await registry.put([], [{ ...unreachable, status: 'retired' }]);
      await t.stack.container.registry.refresh();
    }
    expect(await published(MODEL)).toMatchObject({ input: 0.36, output: 1.08 });
  });
});
