import type { AccountProfile } from '#core/accounting.ts';
import type { Authenticator } from '#core/authenticator.ts';
import { Gateway, type GatewayDeps } from '#core/gateway.ts';
import type { HealthPolicy } from '#core/health.ts';
import type { Clock } from '#core/ports.ts';
import { RefreshingCache } from '#core/refreshing-cache.ts';
import type { Catalog, Deployment, Model } from '#core/registry.ts';
import { type Config, loadConfig } from '#functions/config.ts';
import { tables } from '#lib/resources.ts';

/** A chat model for unit tests; override any field. */
export const chatModel = (overrides: Partial<Model> = {}): Model => ({
  id: 'famA-test',
  family: 'famA',
  kind: 'chat',
  contextWindow: 10_000,
  rates: { input: 1, output: 2 },
  flags: {},
  status: 'active',
  created: 0,
  ...overrides,
});

export const deployment = (overrides: Partial<Deployment> = {}): Deployment => ({
  id: 'famA-test@p1',
  model: 'famA-test',
  provider: 'p1',
  adapter: 'openai-compatible',
  baseUrl: 'http://upstream.invalid/v1',
  upstreamModel: 'upstream-model',
  keyRefs: ['env:K1'],
  priority: 1,
  weight: 1,
  status: 'active',
  ...overrides,
});

/** Counts tokens as whitespace-separated words: predictable arithmetic for estimate tests. */
const words = (text: string) => text.split(/\s+/).filter(Boolean).length;
export const wordCounter = { count: words, countUpTo: (text: string) => words(text) };

/** A clock tests move by hand. */
export const manualClock = (start = 1_000_000) => {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
};

/** Deadline alarms on a manual wall clock: `advance` fires every alarm it passes, in order. */
export const manualAlarms = (start = 1_000_000) => {
  let now = start;
  let pending: { when: number; fire: () => void }[] = [];
  return {
    now: () => now,
    at: (when: number, fire: () => void) => {
      const alarm = { when, fire };
      pending.push(alarm);
      return () => {
        pending = pending.filter((a) => a !== alarm);
      };
    },
    advance: (ms: number) => {
      now += ms;
      const due = pending.filter((a) => a.when <= now).sort((x, y) => x.when - y.when);
      pending = pending.filter((a) => a.when > now);
      for (const alarm of due) alarm.fire();
    },
    /** Alarms set and not yet fired or cancelled. */
    get pending() {
      return pending.length;
    },
  };
};

/**
 * A gateway for routing and admission tests: no keys to check, no catalog (callers pass what `resolve` would
 * return), no admission unless given, a manual clock and alarms, and the first choice of every random pick.
 */
export const testGateway = (deps: Partial<GatewayDeps> & Pick<GatewayDeps, 'clock'>): Gateway =>
  new Gateway({
    authenticator: {} as Authenticator,
    admission: null,
    catalog: async () => ({}) as Catalog,
    alarms: manualAlarms(),
    random: () => 0,
    maxAttempts: 3,
    ...deps,
  });

/** Admission's account profiles where every account exists and is trusted, at the trusted tier's limits. */
export const trustedAccounts = (clock: Clock, ttlMs = 60_000) =>
  new RefreshingCache<AccountProfile | null>({
    load: async (id) => ({ id, tier: 'trusted', quota: null, limitsGen: 0 }),
    clock,
    ttlMs,
  });

/** Deployment health with small round numbers: 4 calls, 3 overloads, 10 s cool-down doubling to 40 s. */
export const TEST_HEALTH_POLICY: HealthPolicy = {
  windowMs: 60_000,
  minCalls: 4,
  failureRate: 0.5,
  overloadRun: 3,
  failureRun: 3,
  cooldownMs: 10_000,
  maxCooldownMs: 40_000,
};

/**
 * A function configuration as a Lambda's environment gives it: every table and the settlement queue named (nothing
 * is reached unless a test points a client somewhere), logs silent; `env` adds or overrides variables.
 */
export const functionConfig = (env: Readonly<Record<string, string>> = {}): Config =>
  loadConfig({
    ...Object.fromEntries(Object.values(tables).map((t) => [t.envVar, `t-${t.envVar}`])),
    SETTLEMENT_QUEUE_URL: 'http://127.0.0.1:9/000000000000/settlement',
    LOG_LEVEL: 'silent',
    ...env,
  });
