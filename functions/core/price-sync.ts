import { Catalog, type Deployment, type Model, RATE_NAMES, type Rates } from './registry.ts';

type RateName = (typeof RATE_NAMES)[number];

/**
 * How far above what we trust a provider's listed rate may be and still be applied: 3×. What this guards against
 * is out by 10× to 1,000,000× (a per-token price read as per-million, a unit change, a slipped decimal on the
 * provider's side), while a real provider raising a model's price more than threefold in one step is rare. When it
 * happens the sync is refused and alarms (PRICE_SYNC_REFUSED_PREFIX); an operator who confirms the price raises the
 * deployment's configured cost, which the floor always honours and which moves this bound with it. The bound is
 * measured from the configured cost, never from the price synced last, so a run of rises each under 3× cannot
 * ratchet the price away from what an operator set; and a configured cost left far below the provider's price (a
 * stale registry file) alarms too, while the synced price kept goes on flooring. Falls are not bounded: the floor
 * never goes below the configured cost whatever the sync stores.
 */
export const MAX_SYNCED_RISE = 3;

/** The start of the warn line each refused sync logs (functions/price-sync.ts), for an operator alarm to match. */
export const PRICE_SYNC_REFUSED_PREFIX = 'price sync refused';

/** A listed rate the sync did not apply. */
export interface RefusedRate {
  readonly rate: RateName;
  /** What the provider's list says. */
  readonly listed: number;
  /** The deployment's configured cost of that rate; null when it has none. */
  readonly configured: number | null;
  /** The highest listed rate that would have been applied (syncBound). */
  readonly limit: number;
}

/** A deployment whose sync was refused as a whole: it keeps the synced price it had, if any. */
export interface RefusedSync {
  readonly deployment: string;
  readonly model: string;
  readonly rates: readonly RefusedRate[];
}

/** What one sync learned: deployments whose synced price changed, the published rates that moved, and refusals. */
export interface PriceSyncPlan {
  readonly updated: Deployment[];
  readonly republished: { readonly model: string; readonly before: Rates; readonly after: Rates }[];
  readonly refused: RefusedSync[];
}

const sameRates = (a: Rates | undefined, b: Rates): boolean =>
  a !== undefined && a.input === b.input && a.output === b.output && a.cachedInput === b.cachedInput;

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
 *   rate (price-floor.ts), so what the sync stores for them reaches no customer; refusing would only hold back the
 *   deployment's other rates and raise a false alarm.
 * Rounded to 1e-9 so that float noise (3 × 0.7 is 2.0999999999999996) does not refuse a rise of exactly 3×.
 */
const syncBound = (model: Model, d: Deployment, rate: RateName): number | null => {
  const list = (model.listRates ?? model.rates)[rate];
  if (model.flags.free || list === undefined) return null;
  const configured = d.cost?.[rate];
  const anchor = configured !== undefined && configured > 0 ? configured : list;
  return Math.round(MAX_SYNCED_RISE * anchor * 1e9) / 1e9;
};

/**
 * Applies fetched price lists to the registry's synced prices (Deployment.syncedCost). `prices` maps a deployment id
 * to its provider's list (absent: not fetched or failed; the deployment keeps what it had). A deployment whose
 * upstream model is not in its provider's list keeps it too: a missing entry is not a price of zero. A price equal
 * to what is known already — synced before, or else the configured cost — is no change to write. A list that puts
 * any rate above its bound (syncBound) is not trusted at all: the deployment keeps what it had, every rate of it,
 * and is reported in `refused`.
 */
export const planPriceSync = (
  models: readonly Model[],
  deployments: readonly Deployment[],
  prices: ReadonlyMap<string, ReadonlyMap<string, Rates> | null>,
  minMargin: number,
): PriceSyncPlan => {
  const updated: Deployment[] = [];
  const refused: RefusedSync[] = [];
  const byId = new Map(models.map((m) => [m.id, m]));
  const next = deployments.map((d) => {
    // Price lists are per token; audio rates are per minute or per character, so they are not comparable.
    const model = byId.get(d.model);
    if (model?.kind !== 'chat' && model?.kind !== 'embedding') return d;
    const listed = prices.get(d.id)?.get(d.upstreamModel);
    if (!listed) return d;
    // Only the rates this model has: a provider may list an output rate for an embedding model, or a cached
    // rate for a model we do not cache for — stored, they would make the registry one a load refuses.
    const applicable: Rates = {
      input: listed.input,
      ...(model.kind === 'chat' && listed.output !== undefined ? { output: listed.output } : {}),
      ...(model.flags.promptCaching && listed.cachedInput !== undefined
        ? { cachedInput: listed.cachedInput }
        : {}),
    };
    const above: RefusedRate[] = [];
    for (const rate of RATE_NAMES) {
      const value = applicable[rate];
      const limit = syncBound(model, d, rate);
      // Written so that a listed NaN is refused too, not let through by a comparison that is always false.
      if (value !== undefined && limit !== null && !(value <= limit))
        above.push({ rate, listed: value, configured: d.cost?.[rate] ?? null, limit });
    }
    if (above.length > 0) {
      refused.push({ deployment: d.id, model: d.model, rates: above });
      return d;
    }
    // A rate the provider does not list keeps what was known of it: a missing price is not a price of zero.
    const known = d.syncedCost ?? d.cost;
    const syncedCost: Rates = { ...known, ...applicable };
    if (sameRates(known, syncedCost)) return d;
    const changed = { ...d, syncedCost };
    updated.push(changed);
    return changed;
  });
  const before = new Catalog(models, deployments, minMargin);
  const after = new Catalog(models, next, minMargin);
  const republished: PriceSyncPlan['republished'] = [];
  for (const [id, model] of after.models) {
    const old = before.models.get(id)?.rates;
    if (old && !sameRates(old, model.rates)) republished.push({ model: id, before: old, after: model.rates });
  }
  return { updated, republished, refused };
};
