import middy from '@middy/core';
import type { ScheduledEvent } from 'aws-lambda';
import { MAX_SYNCED_RISE } from '#core/price-floor.ts';
import {
  PRICE_LIST_UNAVAILABLE,
  PRICE_SYNC_REFUSED_PREFIX,
  planPriceSync,
  type RefusedSync,
} from '#core/price-sync.ts';
import type { Deployment, Rates } from '#core/registry.ts';
import { type Container, containerFromEnv } from './container.ts';

export interface PriceSyncResult {
  /** Active deployments whose provider was asked for prices. */
  readonly checked: number;
  readonly updated: string[];
  /** Providers (adapter and base URL) whose price list could not be read; their deployments kept their cost. */
  readonly failed: string[];
  readonly republished: { readonly model: string; readonly before: Rates; readonly after: Rates }[];
  /** Deployments whose listed price was above its bound (core/price-sync.ts): not applied, each logged as a warning. */
  readonly refused: RefusedSync[];
}

/**
 * Scheduled: refreshes every active deployment's upstream cost from its provider's price list, stores the
 * changes, and logs the published rates that moved as a result (the price floor, core/price-floor.ts). Gateway
 * instances pick the new rates up with their next registry refresh; billing always uses the published rates.
 * One provider list is read once however many deployments share it, and one failing provider does not stop
 * the others. A price list that would raise a deployment's cost implausibly far is refused, and the refusal logged
 * as a warning for an alarm to catch (core/price-sync.ts).
 */
export const createHandler = (container: () => Container) =>
  middy<ScheduledEvent | Record<string, never>, PriceSyncResult>().handler(async () => {
    const c = container();
    const { models, deployments } = await c.registryStore.load();
    const groups = new Map<string, Deployment[]>();
    for (const d of deployments) {
      if (d.status !== 'active' || !c.prices(d.adapter)) continue;
      const key = `${d.adapter} ${d.baseUrl} ${d.keyRefs[0] ?? ''}`;
      groups.set(key, [...(groups.get(key) ?? []), d]);
    }
    const prices = new Map<string, ReadonlyMap<string, Rates> | null>();
    const failed: string[] = [];
    await Promise.all(
      [...groups.values()].map(async (group) => {
        const first = group[0] as Deployment;
        try {
          const list = await c.prices(first.adapter)?.prices({ deployment: first, keyIndex: 0 });
          for (const d of group) prices.set(d.id, list ?? null);
        } catch (error) {
          failed.push(`${first.adapter} ${first.baseUrl}`);
          c.log.warn(`${PRICE_LIST_UNAVAILABLE}; costs kept`, { provider: first.provider, error });
        }
      }),
    );
    const plan = planPriceSync(models, deployments, prices, c.config.priceMinMargin);
    for (const r of plan.refused) {
      // Logged before any write, so a failing write cannot hide it. One line per deployment, its message starting
      // with PRICE_SYNC_REFUSED_PREFIX for the operator's alarm: ids, the model and the rates, never the
      // deployment's key references.
      c.log.warn(
        `${PRICE_SYNC_REFUSED_PREFIX}: a listed rate is over ${MAX_SYNCED_RISE}× the configured cost ` +
          '(the list rate without one); synced price kept',
        { deployment: r.deployment, model: r.model, rates: r.rates },
      );
    }
    const updated: string[] = [];
    for (const d of plan.updated) {
      // Only the synced price is written, in an item of its own (DynamoRegistry.setSyncedCost).
      await c.registryStore.setSyncedCost(d, d.syncedCost as Rates, c.clock.now());
      updated.push(d.id);
      c.log.info('upstream price synced', { deployment: d.id, syncedCost: d.syncedCost });
    }
    for (const r of plan.republished) c.log.info('published rates changed', r);
    return {
      checked: [...groups.values()].reduce((n, g) => n + g.length, 0),
      updated,
      failed,
      republished: plan.republished,
      refused: plan.refused,
    };
  });

export const handler = createHandler(containerFromEnv);
