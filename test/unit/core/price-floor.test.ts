import { describe, expect, it } from 'vitest';
import { parsePriceList } from '#adapters/upstream/openai-prices.ts';
import { publishedRates } from '#core/price-floor.ts';
import { PRICE_SYNC_REFUSED_PREFIX, planPriceSync } from '#core/price-sync.ts';
import { Catalog, type Deployment, type Model, type Rates } from '#core/registry.ts';
import type { Container } from '#functions/container.ts';
import { createHandler } from '#functions/price-sync.ts';
import { invocationContext } from '#local/function-url.ts';
import { chatModel, deployment } from '#test/fixtures.ts';

const model = chatModel({ rates: { input: 0.25, output: 0.8, cachedInput: 0.1 } });

describe('publishedRates', () => {
  it('is the list rate while every cost leaves the margin', () => {
    const d = deployment({ cost: { input: 0.2, output: 0.6, cachedInput: 0.05 } });
    expect(publishedRates(model, [d], 0.2)).toEqual({ input: 0.25, output: 0.8, cachedInput: 0.1 });
  });

  it('floors each rate on its own at the highest cost × (1 + margin), rounded up to the micro-dollar', () => {
    const cheap = deployment({ id: 'a', cost: { input: 0.1, output: 0.7 } }); // output floor 0.84
    const dear = deployment({ id: 'b', cost: { input: 0.2500001, output: 0.1 } }); // input floor 0.30000012 → 0.300001
    expect(publishedRates(model, [cheap, dear], 0.2)).toEqual({
      input: 0.300001,
      output: 0.84,
      cachedInput: 0.1,
    });
  });

  it('does not let binary noise round a floor up (0.07 × 1.2 is 0.084)', () => {
    const m = chatModel({ rates: { input: 0.01, output: 0.01 } });
    expect(publishedRates(m, [deployment({ cost: { input: 0.07, output: 0.07 } })], 0.2)).toEqual({
      input: 0.084,
      output: 0.084,
    });
  });

  it('ignores retired deployments and rates a deployment does not report', () => {
    const retired = deployment({ id: 'r', status: 'retired', cost: { input: 9, output: 9 } });
    const inputOnly = deployment({ id: 'i', cost: { input: 1 } });
    expect(publishedRates(model, [retired, inputOnly], 0.2)).toEqual({
      input: 1.2,
      output: 0.8,
      cachedInput: 0.1,
    });
  });

  it('ignores a deployment drained to weight 0: it serves no call, so its cost raises no price', () => {
    const drained = deployment({ id: 'd', weight: 0, cost: { input: 9, output: 9 } });
    const serving = deployment({ id: 's', cost: { input: 0.1, output: 0.1 } });
    expect(publishedRates(model, [drained, serving], 0.2)).toEqual({
      input: 0.25,
      output: 0.8,
      cachedInput: 0.1,
    });
  });

  it('leaves free models free', () => {
    const free = chatModel({ rates: { input: 0, output: 0 }, flags: { free: true } });
    expect(publishedRates(free, [deployment({ cost: { input: 1, output: 1 } })], 0.2)).toEqual({
      input: 0,
      output: 0,
    });
  });

  it('is what the catalog publishes, keeping the list rates alongside', () => {
    const catalog = new Catalog([model], [deployment({ model: model.id, cost: { input: 0.5 } })], 0.2);
    expect(catalog.models.get(model.id)).toMatchObject({
      rates: { input: 0.6, output: 0.8, cachedInput: 0.1 },
      listRates: { input: 0.25, output: 0.8, cachedInput: 0.1 },
    });
    // A catalog rebuilt from published models floors from the list rates, never compounding.
    const again = new Catalog([...catalog.models.values()], [deployment({ model: model.id })], 0.2);
    expect(again.models.get(model.id)?.rates).toEqual({ input: 0.25, output: 0.8, cachedInput: 0.1 });
  });
});

describe('parsePriceList', () => {
  it('reads per-1M prices (input/output/cached_input)', () => {
    const list = parsePriceList({
      data: [
        { id: 'm1', pricing: { input: 0.2, output: '0.6', cached_input: 0.05 } },
        { id: 'm2' },
        { id: 'm3', pricing: { output: 1 } },
      ],
    });
    expect(list).toEqual(new Map([['m1', { input: 0.2, output: 0.6, cachedInput: 0.05 }]]));
  });

  it('reads Together’s list, a bare array of models with per-1M prices', () => {
    const list = parsePriceList([
      {
        id: 'meta-llama/Llama-3.3-70B-Instruct-Turbo',
        object: 'model',
        type: 'chat',
        pricing: { hourly: 0, input: 0.88, output: 0.88, base: 0, finetune: 0 },
      },
    ]);
    expect(list?.get('meta-llama/Llama-3.3-70B-Instruct-Turbo')).toEqual({ input: 0.88, output: 0.88 });
  });

  it('reads DeepInfra’s list, its per-1M prices under metadata.pricing', () => {
    const list = parsePriceList({
      object: 'list',
      data: [
        {
          id: 'deepseek-ai/DeepSeek-V3',
          object: 'model',
          metadata: { pricing: { input_tokens: 0.38, output_tokens: 0.89, cache_read_tokens: 0.19 } },
        },
        { id: 'no-metadata', object: 'model', metadata: null },
      ],
    });
    expect(list).toEqual(
      new Map([['deepseek-ai/DeepSeek-V3', { input: 0.38, output: 0.89, cachedInput: 0.19 }]]),
    );
  });

  it('reads per-token prices (prompt/completion) as per-1M', () => {
    const list = parsePriceList({
      data: [
        {
          id: 'm',
          pricing: { prompt: '0.0000003', completion: '0.0000012', input_cache_read: '0.00000003' },
        },
      ],
    });
    expect(list?.get('m')).toEqual({ input: 0.3, output: 1.2, cachedInput: 0.03 });
  });

  it('is null for a list without prices and refuses a body that is not a list', () => {
    expect(parsePriceList({ object: 'list', data: [{ id: 'gpt', object: 'model' }] })).toBeNull();
    expect(() => parsePriceList({ error: 'nope' })).toThrow(/data/);
    expect(parsePriceList({ data: [{ id: 'neg', pricing: { input: -1 } }] })).toBeNull();
  });
});

describe('planPriceSync', () => {
  const a = deployment({ id: 'a', model: model.id, upstreamModel: 'up', cost: { input: 0.2, output: 0.1 } });
  const b = deployment({ id: 'b', model: model.id, upstreamModel: 'up2', cost: { input: 0.1, output: 0.1 } });

  it('updates changed costs only and reports the published rates that moved', () => {
    const plan = planPriceSync(
      [model],
      [a, b],
      new Map([
        ['a', new Map([['up', { input: 0.5, output: 0.1 }]])],
        ['b', new Map([['up2', { input: 0.1, output: 0.1 }]])],
      ]),
      0.2,
    );
    // The provider's price goes beside the configured cost, which no sync rewrites.
    expect(plan.updated).toEqual([{ ...a, syncedCost: { input: 0.5, output: 0.1 } }]);
    expect(plan.republished).toEqual([
      { model: model.id, before: model.rates, after: { input: 0.6, output: 0.8, cachedInput: 0.1 } },
    ]);
  });

  it('keeps a configured rate the provider does not list (merge, never wipe)', () => {
    const full = { ...a, cost: { input: 0.1, output: 0.7, cachedInput: 0.05 } };
    const plan = planPriceSync([model], [full], new Map([['a', new Map([['up', { input: 0.2 }]])]]), 0.2);
    expect(plan.updated).toEqual([{ ...full, syncedCost: { input: 0.2, output: 0.7, cachedInput: 0.05 } }]);
    // The output floor (0.7 × 1.2 = 0.84) survives the sync.
    expect(new Catalog([model], plan.updated, 0.2).models.get(model.id)?.rates).toMatchObject({
      output: 0.84,
    });
    expect(plan.republished).toEqual([]);
  });

  it('stores only the rates the model has: no output rate for an embedding model, no cached rate without caching', () => {
    const embed = { ...chatModel({ id: 'emb', rates: { input: 0.05 } }), kind: 'embedding' as const };
    const d = deployment({ id: 'e', model: 'emb', upstreamModel: 'up-emb', cost: { input: 0.02 } });
    const listed = { input: 0.03, output: 0.2, cachedInput: 0.01 };
    const plan = planPriceSync([embed], [d], new Map([['e', new Map([['up-emb', listed]])]]), 0.2);
    expect(plan.updated).toEqual([{ ...d, syncedCost: { input: 0.03 } }]);
  });

  it('compares with the price synced last, and floors on the higher of it and the configured cost', () => {
    const synced = { ...a, syncedCost: { input: 0.5, output: 0.1 } };
    // The same price again: nothing to write, though it differs from the configured cost.
    expect(
      planPriceSync([model], [synced], new Map([['a', new Map([['up', { input: 0.5, output: 0.1 }]])]]), 0.2)
        .updated,
    ).toEqual([]);
    // A registry file loaded with last month's lower cost cannot take the floor under the provider's price.
    const stale = { ...synced, cost: { input: 0.2, output: 0.1 } };
    expect(new Catalog([model], [stale], 0.2).models.get(model.id)?.rates).toMatchObject({ input: 0.6 });
    // Unless the synced price is more than three times that cost: then it is not trusted (the sync's own refusal
    // alarms until the operator raises the cost), and the floor stands on the configured cost.
    const far = { ...synced, cost: { input: 0.05, output: 0.1 } };
    expect(new Catalog([model], [far], 0.2).models.get(model.id)?.rates).toMatchObject({ input: 0.25 });
    // Nor can a provider's price that fell take it under what the operator says the deployment costs.
    const dear = { ...a, cost: { input: 0.5, output: 0.1 }, syncedCost: { input: 0.1, output: 0.1 } };
    expect(new Catalog([model], [dear], 0.2).models.get(model.id)?.rates).toMatchObject({ input: 0.6 });
  });

  it('leaves audio deployments alone: per-token price lists do not compare with per-minute rates', () => {
    const stt = chatModel({
      id: 'stt',
      kind: 'transcription',
      rates: { input: 0.001 },
      contextWindow: undefined,
    });
    const d = deployment({ id: 's', model: 'stt', upstreamModel: 'whisper', cost: { input: 0.0007 } });
    const plan = planPriceSync([stt], [d], new Map([['s', new Map([['whisper', { input: 0.5 }]])]]), 0.2);
    expect(plan).toEqual({ updated: [], republished: [], refused: [] });
  });

  it('keeps a cost when the provider was not read, has no prices, or does not list the model', () => {
    const plan = planPriceSync(
      [model],
      [a, b],
      new Map([
        ['a', null],
        ['b', new Map([['other', { input: 9 }]])],
      ]),
      0.2,
    );
    expect(plan).toEqual({ updated: [], republished: [], refused: [] });
  });

  /** One deployment's sync against `listed`, with `a`'s model and upstream model. */
  const syncOf = (d: Deployment, listed: Rates, models: readonly Model[] = [model]) =>
    planPriceSync(models, [d], new Map([[d.id, new Map([[d.upstreamModel, listed]])]]), 0.2);

  it('refuses a listed rate 10× the configured cost: the deployment keeps its synced price, every rate of it', () => {
    const synced = { ...a, syncedCost: { input: 0.3, output: 0.1 } };
    // input 2 is 10× the configured 0.2; output 0.15, within the bound, is held back with it.
    const plan = syncOf(synced, { input: 2, output: 0.15 });
    expect(plan.updated).toEqual([]);
    expect(plan.republished).toEqual([]);
    expect(plan.refused).toEqual([
      {
        deployment: 'a',
        model: model.id,
        rates: [{ rate: 'input', listed: 2, configured: 0.2, limit: 0.6 }],
      },
    ]);
    // What the floor goes on publishing is what the price synced before gives: 0.3 × 1.2.
    expect(new Catalog([model], [synced], 0.2).models.get(model.id)?.rates).toMatchObject({ input: 0.36 });
  });

  it('refuses a per-token price read as per-million (1,000,000×), naming each rate over its bound', () => {
    const other = { ...b, syncedCost: { input: 0.1, output: 0.1 } };
    const plan = planPriceSync(
      [model],
      [a, other],
      new Map([
        ['a', new Map([['up', { input: 200_000, output: 100_000 }]])],
        ['b', new Map([['up2', { input: 0.15, output: 0.1 }]])],
      ]),
      0.2,
    );
    expect(plan.refused).toEqual([
      {
        deployment: 'a',
        model: model.id,
        rates: [
          { rate: 'input', listed: 200_000, configured: 0.2, limit: 0.6 },
          { rate: 'output', listed: 100_000, configured: 0.1, limit: 0.3 },
        ],
      },
    ]);
    // a has no synced price, and none is made for it; b, listed within its bound, is synced as ever.
    expect(plan.updated).toEqual([{ ...other, syncedCost: { input: 0.15, output: 0.1 } }]);
    expect(plan.republished).toEqual([]);
  });

  it('applies a rise of 2× and one of exactly 3×, and is not fooled by float noise at the bound', () => {
    const rise = syncOf(a, { input: 0.4, output: 0.1 });
    expect(rise.refused).toEqual([]);
    expect(rise.updated).toEqual([{ ...a, syncedCost: { input: 0.4, output: 0.1 } }]);
    expect(rise.republished).toEqual([
      { model: model.id, before: model.rates, after: { input: 0.48, output: 0.8, cachedInput: 0.1 } },
    ]);
    // 3 × 0.7 is 2.0999999999999996 in floating point: a listed 2.1 is exactly 3× and applied.
    const seven = { ...a, cost: { input: 0.7, output: 0.1 } };
    expect(syncOf(seven, { input: 2.1, output: 0.1 }).updated).toEqual([
      { ...seven, syncedCost: { input: 2.1, output: 0.1 } },
    ]);
    expect(syncOf(seven, { input: 2.100001, output: 0.1 }).refused).toHaveLength(1);
  });

  it('never bills a stored synced price over its bound, however it got there', () => {
    // Stored before the bound existed, or under a configured cost the operator has since lowered: 1,000× the cost.
    const stored = { ...a, syncedCost: { input: 200, output: 0.1 } };
    expect(new Catalog([model], [stored], 0.2).models.get(model.id)?.rates).toEqual({
      input: 0.25,
      output: 0.8,
      cachedInput: 0.1,
    });
    // Stored while the model was free, which is then made paid: bounded by the list rate (0.8 × 3 for output).
    const once = { ...a, cost: undefined, syncedCost: { input: 0.5, output: 2.5 } };
    expect(new Catalog([model], [once], 0.2).models.get(model.id)?.rates).toEqual({
      input: 0.6,
      output: 0.8,
      cachedInput: 0.1,
    });
  });

  it('bills a synced price of exactly 3× the cost, as the sync stores it (float noise at the bound)', () => {
    // 3 × 0.7 is 2.0999999999999996 in floating point: the sync takes 2.1, and so must the floor.
    const seven = { ...a, cost: { input: 0.7, output: 0.1 }, syncedCost: { input: 2.1, output: 0.1 } };
    expect(new Catalog([model], [seven], 0.2).models.get(model.id)?.rates).toMatchObject({ input: 2.52 });
  });

  it('syncs a deployment that serves no call without the bound or a refusal: its price reaches nobody', () => {
    for (const idle of [
      { ...a, weight: 0 },
      { ...a, status: 'retired' as const },
    ]) {
      const plan = syncOf(idle, { input: 200, output: 0.1 });
      expect(plan.refused).toEqual([]);
      expect(plan.updated).toEqual([{ ...idle, syncedCost: { input: 200, output: 0.1 } }]);
      // Serving again, it is bounded by the floor: the stored price is not billed.
      const back = { ...(plan.updated[0] as Deployment), weight: 1, status: 'active' as const };
      expect(new Catalog([model], [back], 0.2).models.get(model.id)?.rates).toMatchObject({ input: 0.25 });
    }
  });

  it('applies a fall however large: the floor never goes below the configured cost', () => {
    const synced = { ...a, syncedCost: { input: 0.5, output: 0.1 } };
    const plan = syncOf(synced, { input: 0.000001, output: 0.000001 });
    expect(plan.refused).toEqual([]);
    expect(plan.updated).toEqual([{ ...synced, syncedCost: { input: 0.000001, output: 0.000001 } }]);
    expect(new Catalog([model], plan.updated, 0.2).models.get(model.id)?.rates).toMatchObject({
      input: 0.25,
      output: 0.8,
    });
  });

  it('bounds a rate without a configured cost, or with a cost of 0, by the model’s list rate instead', () => {
    // The model lists input at 0.25 and output at 0.8: the bounds are 0.75 and 2.4.
    for (const cost of [undefined, { input: 0, output: 0 }]) {
      const d = deployment({ id: 'z', model: model.id, upstreamModel: 'up', ...(cost ? { cost } : {}) });
      expect(syncOf(d, { input: 0.75, output: 2.4 }).updated).toEqual([
        { ...d, syncedCost: { input: 0.75, output: 2.4 } },
      ]);
      expect(syncOf(d, { input: 0.76, output: 0.5 }).refused).toEqual([
        {
          deployment: 'z',
          model: model.id,
          rates: [{ rate: 'input', listed: 0.76, configured: cost ? 0 : null, limit: 0.75 }],
        },
      ]);
    }
    // A rate the operator lists at 0 on a paid model: nothing vouches for any price above it.
    const zeroList = chatModel({ id: model.id, rates: { input: 0, output: 0.8 } });
    const d = deployment({ id: 'z', model: model.id, upstreamModel: 'up' });
    expect(syncOf(d, { input: 0.01, output: 0.5 }, [zeroList]).refused).toEqual([
      {
        deployment: 'z',
        model: model.id,
        rates: [{ rate: 'input', listed: 0.01, configured: null, limit: 0 }],
      },
    ]);
    expect(syncOf(d, { input: 0, output: 0.5 }, [zeroList]).updated).toHaveLength(1);
  });

  it('does not bound a free model: its prices are not floored, so no synced price of it is billed', () => {
    const free = chatModel({ id: model.id, rates: { input: 0, output: 0 }, flags: { free: true } });
    const d = deployment({
      id: 'f',
      model: model.id,
      upstreamModel: 'up',
      cost: { input: 0.1, output: 0.1 },
    });
    const plan = syncOf(d, { input: 5, output: 5 }, [free]);
    expect(plan.refused).toEqual([]);
    expect(plan.updated).toEqual([{ ...d, syncedCost: { input: 5, output: 5 } }]);
    expect(plan.republished).toEqual([]);
  });
});

describe('price sync handler', () => {
  it(`logs each refused deployment as a warning starting "${PRICE_SYNC_REFUSED_PREFIX}", and writes only the others`, async () => {
    const paid = chatModel({ id: 'm', rates: { input: 0.25, output: 0.8 } });
    const keys = ['secretsmanager:svc/p/key-1'];
    const wrong = deployment({
      id: 'm@p1',
      model: 'm',
      upstreamModel: 'up',
      keyRefs: keys,
      cost: { input: 0.2, output: 0.6 },
    });
    const fine = deployment({
      id: 'm@p2',
      model: 'm',
      provider: 'p2',
      baseUrl: 'http://p2.invalid/v1',
      upstreamModel: 'up',
      cost: { input: 0.2, output: 0.6 },
    });
    const lists: Record<string, Rates> = {
      'http://upstream.invalid/v1': { input: 200_000, output: 0.6 },
      'http://p2.invalid/v1': { input: 0.3, output: 0.6 },
    };
    const written: string[] = [];
    const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
    const line = (level: string) => (message: string, fields?: Record<string, unknown>) => {
      lines.push({ level, message, ...(fields ? { fields } : {}) });
    };
    const container = {
      config: { priceMinMargin: 0.2 },
      clock: { now: () => 0 },
      log: { debug: line('debug'), info: line('info'), warn: line('warn'), error: line('error') },
      registryStore: {
        load: async () => ({ models: [paid], deployments: [wrong, fine] }),
        setSyncedCost: async (d: Deployment) => {
          written.push(d.id);
        },
      },
      prices: () => ({
        prices: async ({ deployment: d }: { deployment: Deployment }) =>
          new Map([[d.upstreamModel, lists[d.baseUrl] as Rates]]),
      }),
    } as unknown as Container;
    const result = await createHandler(() => container)({}, invocationContext('price-sync', 60_000));

    expect(written).toEqual(['m@p2']);
    expect(result?.updated).toEqual(['m@p2']);
    const refusal = {
      deployment: 'm@p1',
      model: 'm',
      rates: [{ rate: 'input', listed: 200_000, configured: 0.2, limit: 0.6 }],
    };
    expect(result?.refused).toEqual([refusal]);
    const warnings = lines.filter((l) => l.level === 'warn');
    expect(warnings).toEqual([
      { level: 'warn', message: expect.stringMatching(/^price sync refused/), fields: refusal },
    ]);
    expect(JSON.stringify(warnings)).not.toContain('secretsmanager');
  });
});
