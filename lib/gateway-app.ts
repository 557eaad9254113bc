import type { App } from 'aws-cdk-lib';
import { ApiStack } from './api-stack.ts';
import { DataStack } from './data-stack.ts';
import { type FunctionDefinition, functions } from './functions.ts';
import { JobsStack } from './jobs-stack.ts';
import { SiteStack } from './site-stack.ts';
import { type StageConfig, stageConfig } from './stage.ts';

export interface GatewayStacks {
  readonly stage: StageConfig;
  readonly data: DataStack;
  readonly api: ApiStack;
  readonly site: SiteStack;
  readonly jobs: JobsStack;
}

const rows = (http: boolean): Record<string, FunctionDefinition> =>
  Object.fromEntries(
    Object.entries(functions as Record<string, FunctionDefinition>).filter(
      ([, definition]) => (definition.trigger.kind === 'http') === http,
    ),
  );

/**
 * The whole service for one stage, in four stacks (ADR 0007), from the stage's CDK context and the function
 * table: data ← api ← site ← jobs. Stacks are environment-agnostic (no lookups), so synth needs no credentials.
 */
export const buildGateway = (app: App): GatewayStacks => {
  const stage = stageConfig((key) => app.node.tryGetContext(key));
  const name = (part: string) => `${stage.prefix}-${part}`;
  const tags = { service: 'svc-inference-gateway', stage: stage.stage };

  const data = new DataStack(app, name('data'), {
    stage: stage.stage,
    production: stage.production,
    providerSecrets: stage.providerSecrets,
    alarmEmail: stage.alarmEmail,
    terminationProtection: stage.production,
    description: 'svc inference gateway: tables, settlement queue and DLQ, provider secrets, alarm topic',
    tags,
  });
  const bindings = {
    tables: data.tables,
    queues: { settlement: data.settlementQueue },
    providerSecrets: data.providerSecrets,
    alarmTopic: data.alarmTopic,
  };
  const api = new ApiStack(app, name('api'), {
    stage,
    functions: rows(true),
    // The site bucket comes later (site depends on api); an HTTP function cannot use it.
    bindings: { ...bindings, buckets: {} },
    // Every stack of a production stage: the site's distribution domain and the Function URLs are the API's
    // public addresses, which a deleted stack loses for good.
    terminationProtection: stage.production,
    description: 'svc inference gateway: HTTP functions, Function URLs and the REST API',
    tags,
  });
  const site = new SiteStack(app, name('site'), {
    stage,
    api: api.api,
    terminationProtection: stage.production,
    description: 'svc inference gateway: site bucket and the CloudFront distribution',
    tags,
  });
  const jobs = new JobsStack(app, name('jobs'), {
    stage,
    functions: rows(false),
    bindings: {
      ...bindings,
      buckets: { site: site.bucket },
      publicBaseUrl: `https://${site.distribution.distributionDomainName}/v1`,
    },
    terminationProtection: stage.production,
    description: 'svc inference gateway: settlement consumer and scheduled jobs',
    tags,
  });
  return { stage, data, api, site, jobs };
};
