import { type Deployment, type Model, RATE_NAMES, type Rates } from './registry.ts';

export type RateName = (typeof RATE_NAMES)[number];

/** Spec §1: prices are floored at a minimum margin over what upstreams charge us. 0.2 = 20 %. */
export const DEFAULT_PRICE_MIN_MARGIN = 0.2;

/**
 * How far above what we trust a provider's listed rate may be and still be applied: 3×. What this guards against
 * is out by 10× to 1,000,000× (a per-token price read as per-million, a unit change, a slipped decimal on the
 * provider's side), while a real provider raising a model's price more than threefold in one step is rare. When it
 * happens the sync is refused and alarms (price-sync.ts), and a synced price above it is never billed; an operator who confirms the price raises the
 * deployment's configured cost, which the floor always honours and which moves this bound with it. The bound is
 * measured from the configured cost, never from the price synced last, so a run of rises each under 3× cannot
 * ratchet the price away from what an operator set; and a configured cost left far below the provider's price (a
 * stale registry file) alarms too, while the synced price kept goes on flooring. Falls are not bounded: the floor
 * never goes below the configured cost whatever the sync stores.
 */
export const MAX_SYNCED_RISE = 3;

/**
 * The highest listed rate a sync applies for one rate of a deployment, or null when that rate is not bounded.
 * - A configured cost above 0: MAX_SYNCED_RISE × that cost.
 * - No configured cost, or 0 (no scale to measure a rise against; registry/example.json's local-simulator
 *   deployment is configured at 0): MAX_SYNCED_RISE × the model's list rate, the price the operator sells that
 *   rate at. An upstream listed at more than three times our own price is as suspect as one three times its cost,
 *   and treating such deployments as unbounded would leave the hole open exactly where no cost was configured
 *   (deployments that rely on the sync alone). A list rate of 0 on a paid model bounds at 0: any positive listed
 *   rate is refused, since nothing the operator wrote vouches for it.
 * - A rate the model does not list, or any rate of a free model: null. The floor takes neither into a published
 *   rate (publishedRates), so what the sync stores for them reaches no customer; refusing would only hold back the
 *   deployment's other rates and raise a false alarm.
 * Rounded to 1e-9 so that float noise (3 × 0.7 is 2.0999999999999996) does not refuse a rise of exactly 3×.
 */
export const syncBound = (model: Model, d: Deployment, rate: RateName): number | null => {
  const list = (model.listRates ?? model.rates)[rate];
  if (model.flags.free || list === undefined) return null;
  const configured = d.cost?.[rate];
  const anchor = configured !== undefined && configured > 0 ? configured : list;
  return Math.round(MAX_SYNCED_RISE * anchor * 1e9) / 1e9;
};

/**
 * Rates are USD per 1M units with at most six decimals (pricing.ts bills them exactly). A floor is rounded
 * *up* to that grid so the margin is never shaved by rounding; the inner rounding to 1e-9 drops binary
 * noise first (0.07 × 1.2 is 0.08399999…, which must floor to 0.084, not 0.084001).
 */
const ceilToMicro = (usd: number): number => Math.ceil(Math.round(usd * 1e9) / 1e3) / 1e6;

/**
 * The published rates of a model: per rate, the larger of the list rate and every active deployment's
 * upstream cost × (1 + margin) — its configured cost or the provider's synced price, whichever is higher (ADR
 * 0006; a synced price above syncBound is ignored). A deployment that reports neither for a rate sets no floor for it (the operator's list rate stands); one
 * drained to weight 0 sets none at all. Free models stay free: their cost is the platform's choice to absorb.
 * Only rates the model lists are published; cached input without its own rate is billed at the input rate,
 * which already covers it.
 */
export const publishedRates = (model: Model, deployments: readonly Deployment[], margin: number): Rates => {
  if (model.flags.free) return model.rates;
  const published: { -readonly [K in keyof Rates]?: number } = {};
  for (const name of RATE_NAMES) {
    const list = model.rates[name];
    if (list === undefined) continue;
    let rate = list;
    for (const d of deployments) {
      // A deployment drained to weight 0 is never routed to: its price must not raise what every call pays.
      if (d.status !== 'active' || d.weight <= 0) continue;
      const configured = d.cost?.[name];
      if (configured !== undefined) rate = Math.max(rate, ceilToMicro(configured * (1 + margin)));
      // A synced price above its bound is not billed, however it was stored: synced before the bound existed, while
      // the model was free, or under a configured cost the operator has since lowered (the sync refuses new ones).
      const synced = d.syncedCost?.[name];
      const bound = syncBound(model, d, name);
      if (synced !== undefined && bound !== null && synced <= bound)
        rate = Math.max(rate, ceilToMicro(synced * (1 + margin)));
    }
    published[name] = rate;
  }
  return published as Rates;
};
