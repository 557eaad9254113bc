import { EngineOverloadedError, retryAfterHeaders, ServiceUnavailableError } from './errors.ts';
import type { HealthBoard, ProbeToken } from './health.ts';
import type { Random } from './ports.ts';
import type { Deployment } from './registry.ts';

/** A request's route: the deployments in the order to try them, and the half-open probes it claimed. */
export interface RoutePlan {
  readonly deployments: readonly Deployment[];
  /** Deployment id → the probe token to report that deployment's outcome with. */
  readonly probes: ReadonlyMap<string, ProbeToken>;
}

const NO_PROBES: ReadonlyMap<string, ProbeToken> = new Map();

/**
 * The order in which a request tries a model's deployments:
 * 1. a half-open deployment whose probe this request claimed (it must be tried to recover);
 * 2. healthy deployments, by ascending priority, weighted-random within a priority;
 * 3. degraded deployments (closed but failing or slow), the same way.
 * Open circuits are skipped, and so are deployments of weight 0: the operator's way to drain one (ADR 0006). If
 * that leaves nothing, the model has no eligible deployment: 429 `engine_overloaded` when every circuit opened on
 * overloads (busy — retry later), else 503.
 */
export const planRoute = (listed: readonly Deployment[], random: Random, health?: HealthBoard): RoutePlan => {
  const model = listed[0]?.model ?? 'this model';
  const deployments = listed.filter((d) => d.weight > 0);
  if (deployments.length === 0) throw noneConfigured(model);
  if (!health) return { deployments: byPriority(deployments, random), probes: NO_PROBES };
  const probing: Deployment[] = [];
  const probes = new Map<string, ProbeToken>();
  const healthy: Deployment[] = [];
  const degraded: Deployment[] = [];
  let fastest: number | null = null;
  for (const d of deployments) {
    // The yardstick of "slow" is a deployment still routed to: one whose circuit opened keeps its median from
    // before it failed for the whole window, and would mark every healthy deployment slower than it as degraded.
    if (health.state(d.id) !== 'closed') continue;
    const p50 = health.p50Ms(d.id);
    if (p50 !== null && (fastest === null || p50 < fastest)) fastest = p50;
  }
  for (const d of deployments) {
    const state = health.state(d.id);
    if (state === 'half-open') {
      const probe = health.claimProbe(d.id);
      if (probe === null) continue;
      probing.push(d);
      probes.set(d.id, probe);
    } else if (state === 'closed') {
      (health.degraded(d.id, fastest) ? degraded : healthy).push(d);
    }
  }
  const plan = [...probing, ...byPriority(healthy, random), ...byPriority(degraded, random)];
  if (plan.length > 0) return { deployments: plan, probes };
  throw noDeploymentNow(model, deployments, health);
};

/**
 * The refusal a request for these deployments gets now, before anything is tried — none may take a call (weight 0,
 * or every circuit open and no probe free) — or null. Asked before admission, so that a call the platform cannot
 * serve costs the client none of its rate limits: an SDK retrying through an outage would otherwise spend the
 * account's minute, and its day, on our failure. Claims no probe.
 */
export const unroutable = (listed: readonly Deployment[], health?: HealthBoard): Error | null => {
  const deployments = listed.filter((d) => d.weight > 0);
  const model = listed[0]?.model ?? 'this model';
  if (deployments.length === 0) return noneConfigured(model);
  if (!health) return null;
  for (const d of deployments) {
    const state = health.state(d.id);
    if (state === 'closed' || (state === 'half-open' && health.probeFree(d.id))) return null;
  }
  return noDeploymentNow(model, deployments, health);
};

/** A model with no deployment to route to at all (none listed, or every one drained to weight 0). */
const noneConfigured = (model: string): Error =>
  new ServiceUnavailableError(`No deployment of \`${model}\` is available right now.`);

const noDeploymentNow = (model: string, deployments: readonly Deployment[], health: HealthBoard): Error => {
  // When a request may next find a deployment to try: the earliest half-open. SDKs retry on Retry-After, and a
  // hint of 1 s for a 15 s cool-down (up to 5 min after failed probes) spends their retries in vain.
  const waitMs = Math.max(1, Math.min(...deployments.map((d) => health.reopensInMs(d.id))));
  const retry = retryAfterHeaders(waitMs);
  if (deployments.every((d) => health.reason(d.id) === 'overloaded')) {
    return new EngineOverloadedError({ headers: retry });
  }
  // Every upstream of this model is failing: a fault of the model (its row and uptime in the usage report),
  // counted towards the platform error rate, not an incident by itself as an empty registry is.
  return new ServiceUnavailableError(
    `No deployment of \`${model}\` is available right now: every upstream is failing. Please retry shortly.`,
    undefined,
    'circuits_open',
    retry,
  );
};

const byPriority = (deployments: readonly Deployment[], random: Random): Deployment[] => {
  const groups = new Map<number, Deployment[]>();
  for (const d of deployments) {
    const group = groups.get(d.priority) ?? [];
    group.push(d);
    groups.set(d.priority, group);
  }
  const plan: Deployment[] = [];
  for (const priority of [...groups.keys()].sort((a, b) => a - b)) {
    plan.push(...weightedOrder(groups.get(priority) ?? [], random));
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
