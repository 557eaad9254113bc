import { type Deployment, type Model, RATE_NAMES, type Rates } from './registry.ts';

/** Spec §1: prices are floored at a minimum margin over what upstreams charge us. 0.2 = 20 %. */
export const DEFAULT_PRICE_MIN_MARGIN = 0.2;

/**
 * Rates are USD per 1M units with at most six decimals (pricing.ts bills them exactly). A floor is rounded
 * *up* to that grid so the margin is never shaved by rounding; the inner rounding to 1e-9 drops binary
 * noise first (0.07 × 1.2 is 0.08399999…, which must floor to 0.084, not 0.084001).
 */
const ceilToMicro = (usd: number): number => Math.ceil(Math.round(usd * 1e9) / 1e3) / 1e6;

/**
 * The published rates of a model: per rate, the larger of the list rate and every active deployment's
 * upstream cost × (1 + margin) — its configured cost or the provider's synced price, whichever is higher (ADR
 * 0006). A deployment that reports neither for a rate sets no floor for it (the operator's list rate stands); one
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
      for (const upstream of [d.cost?.[name], d.syncedCost?.[name]])
        if (upstream !== undefined) rate = Math.max(rate, ceilToMicro(upstream * (1 + margin)));
    }
    published[name] = rate;
  }
  return published as Rates;
};
