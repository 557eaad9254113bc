import {
  BatchWriteItemCommand,
  type BatchWriteItemCommandOutput,
  type DynamoDBClient,
  paginateScan,
  type WriteRequest,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import type { Clock } from '#core/ports.ts';
import { Catalog, type Deployment, type Model } from '#core/registry.ts';
import type { Logger } from './logger.ts';
import { deploymentSchema, describeIssues, modelSchema } from './registry-codec.ts';

/**
 * Registry items: `pk = model#<id>` with `sk = model` for the model and `sk = deployment#<id>` for each of
 * its deployments, so one model's entries sit together. Attributes are the documents of registry-codec.ts.
 */
const modelKey = (id: string) => ({ pk: `model#${id}`, sk: 'model' });
const deploymentKey = (d: Pick<Deployment, 'model' | 'id'>) => ({
  pk: `model#${d.model}`,
  sk: `deployment#${d.id}`,
});

export interface RegistryContents {
  readonly models: Model[];
  readonly deployments: Deployment[];
  /** Items that failed validation: skipped, and reported so an operator can fix them. */
  readonly invalid: string[];
}

export class DynamoRegistry {
  readonly #client: DynamoDBClient;
  readonly #table: string;

  constructor(client: DynamoDBClient, table: string) {
    this.#client = client;
    this.#table = table;
  }

  async load(): Promise<RegistryContents> {
    const models: Model[] = [];
    const deployments: Deployment[] = [];
    const invalid: string[] = [];
    // The registry is small (hundreds of items): a full scan per refresh is cheaper than any index.
    for await (const page of paginateScan({ client: this.#client }, { TableName: this.#table })) {
      for (const item of page.Items ?? []) {
        const { pk, sk, ...doc } = unmarshall(item);
        const schema = sk === 'model' ? modelSchema : deploymentSchema;
        const parsed = schema.safeParse(doc);
        if (!parsed.success) invalid.push(`${pk}/${sk}: ${describeIssues(parsed.error)}`);
        else if (sk === 'model') models.push(parsed.data as Model);
        else deployments.push(parsed.data as Deployment);
      }
    }
    return { models, deployments, invalid };
  }

  /** Upserts models and deployments (25 per batch, retrying unprocessed items). */
  async put(models: readonly Model[], deployments: readonly Deployment[]): Promise<void> {
    const requests: WriteRequest[] = [
      ...models.map((m) => ({
        PutRequest: { Item: marshall({ ...modelKey(m.id), ...m }, { removeUndefinedValues: true }) },
      })),
      ...deployments.map((d) => ({
        PutRequest: { Item: marshall({ ...deploymentKey(d), ...d }, { removeUndefinedValues: true }) },
      })),
    ];
    for (let i = 0; i < requests.length; i += 25) {
      let batch: WriteRequest[] | undefined = requests.slice(i, i + 25);
      while (batch && batch.length > 0) {
        const result: BatchWriteItemCommandOutput = await this.#client.send(
          new BatchWriteItemCommand({ RequestItems: { [this.#table]: batch } }),
        );
        batch = result.UnprocessedItems?.[this.#table];
      }
    }
  }
}

/**
 * Per-instance registry snapshot. The first call loads it; afterwards a stale snapshot is served while
 * one background refresh replaces it, so the hot path never waits on the registry after a cold start.
 */
export class RegistryCache {
  readonly #registry: DynamoRegistry;
  readonly #clock: Clock;
  readonly #maxAgeMs: number;
  readonly #log: Logger;
  #snapshot: Catalog | null = null;
  #loadedAt = 0;
  #refreshing: Promise<Catalog> | null = null;

  constructor(registry: DynamoRegistry, clock: Clock, maxAgeMs: number, log: Logger) {
    this.#registry = registry;
    this.#clock = clock;
    this.#maxAgeMs = maxAgeMs;
    this.#log = log;
  }

  /** The current catalog; awaits only when there is none yet (cold start). */
  async catalog(): Promise<Catalog> {
    if (this.#snapshot === null) return this.refresh();
    if (this.#clock.now() - this.#loadedAt > this.#maxAgeMs && this.#refreshing === null) {
      this.refresh().catch((error: unknown) => this.#log.warn('registry refresh failed', { error }));
    }
    return this.#snapshot;
  }

  refresh(): Promise<Catalog> {
    this.#refreshing ??= this.#registry
      .load()
      .then(({ models, deployments, invalid }) => {
        if (invalid.length > 0) this.#log.warn('registry items skipped', { invalid });
        this.#snapshot = new Catalog(models, deployments);
        this.#loadedAt = this.#clock.now();
        return this.#snapshot;
      })
      .finally(() => {
        this.#refreshing = null;
      });
    return this.#refreshing;
  }
}
