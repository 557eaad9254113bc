import type { Random } from './ports.ts';
import type { Deployment } from './registry.ts';

/**
 * The order in which a request tries a model's deployments: ascending priority; within one priority,
 * a weighted random order, so traffic spreads by weight while every deployment stays a fallback.
 */
export const planRoute = (deployments: readonly Deployment[], random: Random): Deployment[] => {
  const byPriority = new Map<number, Deployment[]>();
  for (const d of deployments) {
    const group = byPriority.get(d.priority) ?? [];
    group.push(d);
    byPriority.set(d.priority, group);
  }
  const plan: Deployment[] = [];
  for (const priority of [...byPriority.keys()].sort((a, b) => a - b)) {
    plan.push(...weightedOrder(byPriority.get(priority) ?? [], random));
  }
  return plan;
};

const weightedOrder = (group: Deployment[], random: Random): Deployment[] => {
  if (group.length < 2) return group;
  const pool = [...group];
  const ordered: Deployment[] = [];
  while (pool.length > 0) {
    const total = pool.reduce((sum, d) => sum + Math.max(0, d.weight), 0);
    let pick = pool.length - 1;
    if (total > 0) {
      let threshold = random() * total;
      pick = pool.findIndex((d) => {
        threshold -= Math.max(0, d.weight);
        return threshold < 0;
      });
      if (pick < 0) pick = pool.length - 1;
    } else {
      pick = Math.floor(random() * pool.length);
    }
    ordered.push(...pool.splice(pick, 1));
  }
  return ordered;
};
