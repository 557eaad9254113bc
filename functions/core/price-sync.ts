import { type RateName, syncBound } from './price-floor.ts';
import { Catalog, type Deployment, type Model, RATE_NAMES, type Rates } from './registry.ts';

/** The start of the warn line each refused sync logs (functions/price-sync.ts), for an operator alarm to match. */
export const PRICE_SYNC_REFUSED_PREFIX = 'price sync refused';
/** How the price sync's log line begins when a provider's price list could not be read (its costs are kept). */
export const PRICE_LIST_UNAVAILABLE = 'price list unavailable';

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
    // A deployment that serves no call (drained to weight 0, retired) sets no floor: its price reaches nobody, and
    // refusing it would only alarm. The floor bounds it again if it comes back (price-floor.ts).
    const serving = d.status === 'active' && d.weight > 0;
    for (const rate of serving ? RATE_NAMES : []) {
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
