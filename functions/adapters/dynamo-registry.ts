import {
  type AttributeValue,
  BatchWriteItemCommand,
  type BatchWriteItemCommandOutput,
  ConditionalCheckFailedException,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  paginateScan,
  TransactionCanceledException,
  TransactWriteItemsCommand,
  UpdateItemCommand,
  type WriteRequest,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import type { Clock } from '#core/ports.ts';
import { Catalog, type Deployment, type Model, type Rates } from '#core/registry.ts';
import type { Logger } from './logger.ts';
import { deploymentSchema, describeIssues, modelSchema, ratesSchema } from './registry-codec.ts';
import { contended } from './transaction-contention.ts';

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
  /** As stored, with their synced prices (`syncedCost`) beside them: see `documents` for what an operator wrote. */
  readonly deployments: Deployment[];
  /** Items that failed validation: skipped, and reported so an operator can fix them. */
  readonly invalid: string[];
}

/**
 * The stored form of a model: its list rates. A model taken from a Catalog carries published rates (price
 * floor applied) and the list rates beside them; writing it back must store the list rates only.
 */
const listed = (m: Model): Model => {
  const { listRates, ...stored } = m;
  return listRates ? { ...stored, rates: listRates } : stored;
};

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
    const synced = new Map<string, Rates>();
    // The registry is small (hundreds of items): a full scan per refresh is cheaper than any index.
    for await (const page of paginateScan({ client: this.#client }, { TableName: this.#table })) {
      for (const item of page.Items ?? []) {
        const { pk, sk, ...doc } = unmarshall(item);
        if (typeof sk === 'string' && sk.startsWith(SYNCED_PREFIX)) {
          const rates = ratesSchema.safeParse(doc.rates);
          if (rates.success) synced.set(`${pk}/${sk.slice(SYNCED_PREFIX.length)}`, rates.data as Rates);
          else invalid.push(`${pk}/${sk}: ${describeIssues(rates.error)}`);
          continue;
        }
        const schema = sk === 'model' ? modelSchema : deploymentSchema;
        const parsed = schema.safeParse(doc);
        if (!parsed.success) invalid.push(`${pk}/${sk}: ${describeIssues(parsed.error)}`);
        else if (sk === 'model') models.push(parsed.data as Model);
        else deployments.push(parsed.data as Deployment);
      }
    }
    return {
      models,
      deployments: deployments.map((d) => {
        const syncedCost = synced.get(`model#${d.model}/${d.id}`);
        return syncedCost ? { ...d, syncedCost } : d;
      }),
      invalid,
    };
  }

  /** Upserts models and deployments (25 per batch, retrying unprocessed items). */
  async put(models: readonly Model[], deployments: readonly Deployment[]): Promise<void> {
    const requests: WriteRequest[] = [
      ...models.map((m) => ({
        PutRequest: { Item: marshall({ ...modelKey(m.id), ...listed(m) }, { removeUndefinedValues: true }) },
      })),
      ...deployments.map((d) => ({ PutRequest: { Item: deploymentItem(d) } })),
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

  /** One model, read consistently (the admin CLI reads what it just wrote); null when there is none. */
  async getModel(id: string): Promise<Model | null> {
    const { Item } = await this.#client.send(
      new GetItemCommand({ TableName: this.#table, Key: marshall(modelKey(id)), ConsistentRead: true }),
    );
    return Item ? (parseItem(Item, modelSchema) as Model) : null;
  }

  /**
   * One deployment by id. Its key is under its model, which the caller may not know: the registry is small,
   * so a consistent filtered scan is the lookup (admin path only, never the hot path).
   */
  async findDeployment(id: string): Promise<Deployment | null> {
    const pages = paginateScan(
      { client: this.#client },
      {
        TableName: this.#table,
        ConsistentRead: true,
        FilterExpression: 'sk = :sk',
        ExpressionAttributeValues: marshall({ ':sk': `deployment#${id}` }),
      },
    );
    for await (const page of pages) {
      const item = page.Items?.[0];
      if (item) return parseItem(item, deploymentSchema) as Deployment;
    }
    return null;
  }

  /** Creates a model. The condition refuses an existing id — retired ones too: retiring is not deleting. */
  async addModel(model: Model): Promise<void> {
    await this.#conditionalPut(
      modelItem(model),
      'attribute_not_exists(pk)',
      `model "${model.id}" already exists`,
    );
  }

  /** Replaces a model's document; the condition refuses a missing one, so a typo cannot create a model. */
  async replaceModel(model: Model): Promise<void> {
    await this.#conditionalPut(modelItem(model), 'attribute_exists(pk)', `no model "${model.id}"`);
  }

  /**
   * Creates a deployment of an existing model, in one transaction: the model's item must exist (so a
   * deployment never points at nothing) and the deployment's must not. Deployment ids are unique across
   * models too; that is the caller's check (`checkRegistry`), as no single condition can span partitions.
   */
  async addDeployment(deployment: Deployment): Promise<void> {
    try {
      await this.#client.send(
        new TransactWriteItemsCommand({
          TransactItems: [
            {
              ConditionCheck: {
                TableName: this.#table,
                Key: marshall(modelKey(deployment.model)),
                ConditionExpression: 'attribute_exists(pk)',
              },
            },
            {
              Put: {
                TableName: this.#table,
                Item: deploymentItem(deployment),
                ConditionExpression: 'attribute_not_exists(pk)',
              },
            },
          ],
        }),
      );
    } catch (error) {
      if (!(error instanceof TransactionCanceledException)) throw error;
      // Cancelled by a concurrent write or throttling, not by a condition: not a refusal — it may pass when run again.
      if (contended(error.CancellationReasons)) throw error;
      const [model] = error.CancellationReasons ?? [];
      throw new RegistryConflictError(
        model?.Code === 'ConditionalCheckFailed'
          ? `no model "${deployment.model}"`
          : `deployment "${deployment.id}" already exists`,
        { cause: error },
      );
    }
  }

  /** Replaces a deployment's document under its model; refuses a missing one. */
  async replaceDeployment(deployment: Deployment): Promise<void> {
    await this.#conditionalPut(
      deploymentItem(deployment),
      'attribute_exists(pk)',
      `no deployment "${deployment.id}" of model "${deployment.model}"`,
    );
  }

  /** Retires a model (never deletes it): only its status changes, so a concurrent edit of other fields stands. */
  async retireModel(id: string): Promise<Model> {
    return (await this.#setStatus(modelKey(id), 'retired', `no model "${id}"`, modelSchema)) as Model;
  }

  /** Retires a deployment (never deletes it), found under its model. */
  async retireDeployment(deployment: Pick<Deployment, 'model' | 'id'>): Promise<Deployment> {
    return (await this.#setStatus(
      deploymentKey(deployment),
      'retired',
      `no deployment "${deployment.id}" of model "${deployment.model}"`,
      deploymentSchema,
    )) as Deployment;
  }

  /**
   * Sets an active deployment's upstream cost, and nothing else: an operator's concurrent edit (weight,
   * retirement) is never overwritten by the price sync. False when the deployment is gone or retired.
   */
  /**
   * Stores a deployment's synced price (the price sync's): an item of its own beside the deployment's document, so
   * that operator writes, which replace the document whole, never touch it, and it never touches theirs.
   */
  async setSyncedCost(deployment: Pick<Deployment, 'model' | 'id'>, rates: Rates, at: number): Promise<void> {
    const { pk } = deploymentKey(deployment);
    await this.#client.send(
      new PutItemCommand({
        TableName: this.#table,
        Item: marshall(
          { pk, sk: `${SYNCED_PREFIX}${deployment.id}`, rates, at },
          { removeUndefinedValues: true },
        ),
      }),
    );
  }

  async #setStatus(
    key: Record<string, string>,
    status: 'active' | 'retired',
    refusal: string,
    schema: typeof modelSchema | typeof deploymentSchema,
  ) {
    try {
      const { Attributes } = await this.#client.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: marshall(key),
          UpdateExpression: 'SET #status = :status',
          // Without it, an update of a missing key would create a fragment of an item.
          ConditionExpression: 'attribute_exists(pk)',
          ExpressionAttributeNames: { '#status': 'status' },
          ExpressionAttributeValues: marshall({ ':status': status }),
          ReturnValues: 'ALL_NEW',
        }),
      );
      return parseItem(Attributes ?? {}, schema);
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException)
        throw new RegistryConflictError(refusal, { cause: error });
      throw error;
    }
  }

  async #conditionalPut(item: Record<string, AttributeValue>, condition: string, refusal: string) {
    try {
      await this.#client.send(
        new PutItemCommand({ TableName: this.#table, Item: item, ConditionExpression: condition }),
      );
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException)
        throw new RegistryConflictError(refusal, { cause: error });
      throw error;
    }
  }
}

/** A conditional registry write was refused: the entry exists (add) or does not (update, retire). */
export class RegistryConflictError extends Error {
  override readonly name = 'RegistryConflictError';
}

const modelItem = (m: Model) =>
  marshall({ ...modelKey(m.id), ...listed(m) }, { removeUndefinedValues: true });
/** A deployment's document as an operator wrote it: its synced price lives in an item of its own. */
const deploymentItem = (d: Deployment) => {
  const { syncedCost: _synced, ...document } = d;
  return marshall({ ...deploymentKey(document), ...document }, { removeUndefinedValues: true });
};

/** Sort key prefix of a deployment's synced price, in its model's partition (`synced#<deployment id>`). */
const SYNCED_PREFIX = 'synced#';

const parseItem = (
  item: Record<string, AttributeValue>,
  schema: typeof modelSchema | typeof deploymentSchema,
) => {
  const { pk, sk, ...doc } = unmarshall(item);
  const parsed = schema.safeParse(doc);
  if (!parsed.success)
    throw new Error(`registry item ${pk}/${sk} is invalid: ${describeIssues(parsed.error)}`);
  return parsed.data;
};

/**
 * Per-instance registry snapshot. The first call loads it; past `maxAgeMs` a stale snapshot is served while one
 * background refresh replaces it, so under steady traffic the hot path never waits on the registry. Past twice
 * that, a request waits for the reload instead: after an idle spell a retired model would otherwise be served,
 * and a raised price undercharged, on the first call (serving a snapshot of any age did both). If the reload
 * fails the old snapshot still serves: the store being down fails admission closed anyway.
 */
export class RegistryCache {
  readonly #registry: DynamoRegistry;
  readonly #clock: Clock;
  readonly #maxAgeMs: number;
  readonly #log: Logger;
  #snapshot: Catalog | null = null;
  #loadedAt = 0;
  #refreshing: Promise<Catalog> | null = null;

  readonly #minMargin: number;

  constructor(registry: DynamoRegistry, clock: Clock, maxAgeMs: number, log: Logger, minMargin: number) {
    this.#registry = registry;
    this.#minMargin = minMargin;
    this.#clock = clock;
    this.#maxAgeMs = maxAgeMs;
    this.#log = log;
  }

  /** The current catalog; awaits a load when there is none yet (cold start) or it is past twice its age. */
  async catalog(): Promise<Catalog> {
    if (this.#snapshot === null) return this.refresh();
    const age = this.#clock.now() - this.#loadedAt;
    if (age > 2 * this.#maxAgeMs) {
      const stale = this.#snapshot;
      return this.refresh().catch((error: unknown) => {
        this.#log.warn('registry refresh failed', { error });
        return stale;
      });
    }
    if (age > this.#maxAgeMs && this.#refreshing === null) {
      this.refresh().catch((error: unknown) => this.#log.warn('registry refresh failed', { error }));
    }
    return this.#snapshot;
  }

  refresh(): Promise<Catalog> {
    this.#refreshing ??= this.#registry
      .load()
      .then(({ models, deployments, invalid }) => {
        if (invalid.length > 0) this.#log.warn('registry items skipped', { invalid });
        this.#snapshot = new Catalog(models, deployments, this.#minMargin);
        this.#loadedAt = this.#clock.now();
        return this.#snapshot;
      })
      .finally(() => {
        this.#refreshing = null;
      });
    return this.#refreshing;
  }
}
