import { readFileSync } from 'node:fs';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { z } from 'zod';
import { DynamoAccounts } from '#adapters/dynamo-accounts.ts';
import { DynamoRegistry } from '#adapters/dynamo-registry.ts';
import { deploymentSchema, describeIssues, issueList, modelSchema } from '#adapters/registry-codec.ts';
import type { Deployment, Model, Rates } from '#core/registry.ts';
import type { PriceLists } from '#sim/prices.ts';
import { localClientConfig } from './emulators.ts';

/** The spec's catalog (§2.1): every chat model plus the three utility models. */
export const CATALOG_FILE = new URL('../../registry/catalog.json', import.meta.url);

export const readCatalog = (file: URL | string = CATALOG_FILE): Model[] => {
  const parsed = z.object({ models: z.array(modelSchema) }).safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!parsed.success) throw new Error(`Invalid catalog ${String(file)}: ${describeIssues(parsed.error)}`);
  return parsed.data.models as Model[];
};

/** Secrets the seeded simulator deployments reference; the simulator accepts any key. */
export const SIMULATOR_SECRETS = {
  SIM_A_KEY_1: 'sim-a-key-1',
  SIM_A_KEY_2: 'sim-a-key-2',
  SIM_B_KEY_1: 'sim-b-key-1',
} as const;

/** Reasoning-tier models are called with reasoning on; no other model ever is (spec §4 rule 1). */
const REASONING_PARAMS = { reasoning_effort: 'medium' };

/**
 * What each simulated provider charges us, as a share of the list rate: enough margin that the price floor
 * leaves list prices as they are until a test (or `PUT /_sim/prices/…`) raises a cost.
 */
export const SIMULATED_COST_SHARE = { 'sim-a': 0.7, 'sim-b': 0.75 } as const;

const shareOf = (rates: Rates, share: number): Rates => {
  const scale = (usd: number) => Math.round(usd * share * 1e6) / 1e6;
  return {
    input: scale(rates.input),
    ...(rates.output === undefined ? {} : { output: scale(rates.output) }),
    ...(rates.cachedInput === undefined ? {} : { cachedInput: scale(rates.cachedInput) }),
  };
};

/** The simulator's price lists matching the seeded deployments' costs (free models are not priced). */
export const simulatorPrices = (models: readonly Model[]): PriceLists =>
  Object.fromEntries(
    Object.entries(SIMULATED_COST_SHARE).map(([provider, share]) => [
      provider,
      Object.fromEntries(models.filter((m) => !m.flags.free).map((m) => [m.id, shareOf(m.rates, share)])),
    ]),
  );

/**
 * Two simulated providers per model: `sim-a` (priority 1, two keys) and `sim-b` (priority 2, one key), each
 * at its own path of the simulator, so fallback and key cycling work out of the box. Their costs are what
 * the simulator's price lists say (simulatorPrices), as a price sync would have found.
 */
export const simulatorDeployments = (models: readonly Model[], simulatorUrl: string): Deployment[] =>
  models.flatMap((model) =>
    (['sim-a', 'sim-b'] as const).map((provider, i) => ({
      id: `${model.id}@${provider}`,
      model: model.id,
      provider,
      adapter: 'openai-compatible' as const,
      baseUrl: `${simulatorUrl}/p/${provider}/v1`,
      upstreamModel: model.id,
      keyRefs: provider === 'sim-a' ? ['env:SIM_A_KEY_1', 'env:SIM_A_KEY_2'] : ['env:SIM_B_KEY_1'],
      priority: i + 1,
      weight: 1,
      ...(model.flags.free ? {} : { cost: shareOf(model.rates, SIMULATED_COST_SHARE[provider]) }),
      ...(model.flags.reasoning ? { reasoningParams: REASONING_PARAMS } : {}),
      status: 'active' as const,
    })),
  );

/** How the deployments at `UPSTREAM_BASE_URL` are called. */
export interface ExternalUpstream {
  /** With `UPSTREAM_API_KEY` as their key (an `env:` reference to it: the registry holds no key). */
  readonly withKey?: boolean;
  /** `UPSTREAM_MODEL`: the upstream's name for every model (default: each model's own id). */
  readonly upstreamModel?: string;
}

/** One deployment per model at an operator-chosen OpenAI-compatible server (`UPSTREAM_BASE_URL`). */
export const externalDeployments = (
  models: readonly Model[],
  baseUrl: string,
  options: ExternalUpstream,
): Deployment[] =>
  models.map((model) => ({
    id: `${model.id}@upstream`,
    model: model.id,
    provider: 'upstream',
    adapter: 'openai-compatible' as const,
    baseUrl: baseUrl.replace(/\/+$/, ''),
    upstreamModel: options.upstreamModel ?? model.id,
    keyRefs: options.withKey ? ['env:UPSTREAM_API_KEY'] : [],
    priority: 1,
    weight: 1,
    ...(model.flags.reasoning ? { reasoningParams: REASONING_PARAMS } : {}),
    status: 'active' as const,
  }));

/**
 * What the registry would refuse in the deployments `externalDeployments` makes, one line, or null: the seed writes
 * them without the registry file's checks, and the gateway skips a stored deployment its codec refuses — every call
 * would then be a 503 (a key sent over http to another machine, a control character in UPSTREAM_MODEL). The
 * messages name the rule broken, never the value.
 */
export const externalDeploymentIssues = (
  models: readonly Model[],
  baseUrl: string,
  options: ExternalUpstream,
): string | null => {
  const issues = new Set<string>();
  for (const deployment of externalDeployments(models, baseUrl, options)) {
    const checked = deploymentSchema.safeParse(deployment);
    if (!checked.success) for (const issue of issueList(checked.error)) issues.add(issue);
  }
  return issues.size > 0 ? [...issues].join('; ') : null;
};

export const DEMO_ACCOUNT_ID = 'acct_demo';

export interface SeedOptions {
  readonly dynamodbEndpoint: string;
  readonly accountsTable: string;
  readonly registryTable: string;
  readonly models: readonly Model[];
  readonly deployments: readonly Deployment[];
  /** Use this key for the demo account; a new one is generated otherwise. */
  readonly demoApiKey?: string;
}

/** The name of a demo key `npm start` generated (one given as DEMO_API_KEY is named `demo`). */
export const GENERATED_DEMO_KEY_NAME = 'demo (generated)';

/**
 * Seeds the registry and the demo account with its key; returns the demo key (shown once). A generated key
 * replaces the one an earlier start on the same DATA_DIR generated: only its hash was kept, so nobody can be
 * shown it again, and each restart would otherwise leave one more live key behind. A DEMO_API_KEY is the
 * caller's own and is never revoked here.
 */
export const seed = async (
  options: SeedOptions,
): Promise<{ demoApiKey: string; revokedDemoKeys: number }> => {
  const client = new DynamoDBClient(localClientConfig(options.dynamodbEndpoint));
  try {
    await new DynamoRegistry(client, options.registryTable).put(options.models, options.deployments);
    const accounts = new DynamoAccounts(client, options.accountsTable);
    await accounts.ensureAccount(DEMO_ACCOUNT_ID, 'Demo account');
    let revokedDemoKeys = 0;
    if (!options.demoApiKey) {
      const earlier = (await accounts.listKeys(DEMO_ACCOUNT_ID)).filter(
        (k) => k.name === GENERATED_DEMO_KEY_NAME && k.revokedAt === null,
      );
      for (const k of earlier) revokedDemoKeys += await accounts.revokeKey(DEMO_ACCOUNT_ID, k.prefix);
    }
    const { key } = await accounts
      .createKey(DEMO_ACCOUNT_ID, {
        name: options.demoApiKey ? 'demo' : GENERATED_DEMO_KEY_NAME,
        ...(options.demoApiKey ? { key: options.demoApiKey } : {}),
      })
      .catch((error: unknown) => {
        // A restart on the same DATA_DIR must not bring a revoked demo key back to life.
        if (error instanceof Error && error.message.includes('revoked'))
          throw new Error(
            'DEMO_API_KEY was revoked in this DATA_DIR and stays revoked: start with another key',
          );
        throw error;
      });
    return { demoApiKey: key, revokedDemoKeys };
  } finally {
    client.destroy();
  }
};
