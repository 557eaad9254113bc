import {
  type AttributeDefinition,
  CreateTableCommand,
  DescribeTableCommand,
  DynamoDBClient,
  type KeySchemaElement,
  ResourceInUseException,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import {
  BucketAlreadyExists,
  BucketAlreadyOwnedByYou,
  CreateBucketCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { CreateQueueCommand, GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import {
  buckets,
  type KeyAttribute,
  physicalName,
  queues,
  type TableDefinition,
  type TableId,
  tables,
} from '#lib/resources.ts';
import { type EmulatorEndpoints, localClientConfig } from './emulators.ts';

/** Physical names of everything provisioned for one local stack. */
export interface Provisioned {
  readonly tables: Readonly<Record<TableId, string>>;
  readonly settlementQueueUrl: string;
  readonly settlementQueueArn: string;
  readonly settlementDlqUrl: string;
  readonly siteBucket: string;
}

/**
 * Creates the tables, the settlement queue with its DLQ, and the site bucket in the emulators, from the
 * same definitions the CDK stacks use (lib/resources.ts). Idempotent, so a persisted DATA_DIR restarts
 * cleanly. `prefix` isolates stacks sharing emulators (each test file gets its own).
 */
export const provision = async (
  endpoints: EmulatorEndpoints,
  prefix: string,
  options: { settlementVisibilityTimeoutSeconds?: number } = {},
): Promise<Provisioned> => {
  const dynamo = new DynamoDBClient(localClientConfig(endpoints.dynamodb));
  const sqs = new SQSClient(localClientConfig(endpoints.sqs));
  const s3 = new S3Client({ ...localClientConfig(endpoints.s3), forcePathStyle: true });
  try {
    const tableNames = Object.fromEntries(
      await Promise.all(
        (Object.entries(tables) as [TableId, TableDefinition][]).map(async ([id, definition]) => {
          const name = physicalName(prefix, definition.id);
          await createTable(dynamo, name, definition);
          return [id, name] as const;
        }),
      ),
    ) as Record<TableId, string>;
    const queue = await createQueueWithDlq(
      sqs,
      prefix,
      options.settlementVisibilityTimeoutSeconds ?? queues.settlement.visibilityTimeoutSeconds,
    );
    const siteBucket = physicalName(prefix, buckets.site.id).toLowerCase();
    try {
      await s3.send(new CreateBucketCommand({ Bucket: siteBucket }));
    } catch (error) {
      // A persisted DATA_DIR already has it (s3rver says "exists" where S3 would say "owned by you").
      if (!(error instanceof BucketAlreadyOwnedByYou || error instanceof BucketAlreadyExists)) throw error;
    }
    return { tables: tableNames, ...queue, siteBucket };
  } finally {
    dynamo.destroy();
    sqs.destroy();
    s3.destroy();
  }
};

const createTable = async (client: DynamoDBClient, name: string, definition: TableDefinition) => {
  const keys: KeyAttribute[] = [definition.partitionKey];
  if (definition.sortKey) keys.push(definition.sortKey);
  for (const index of definition.globalIndexes ?? []) {
    keys.push(index.partitionKey);
    if (index.sortKey) keys.push(index.sortKey);
  }
  const attributes = new Map<string, AttributeDefinition>(
    keys.map((k) => [k.name, { AttributeName: k.name, AttributeType: k.type }]),
  );
  const keySchema = (pk: KeyAttribute, sk?: KeyAttribute) => [
    { AttributeName: pk.name, KeyType: 'HASH' as const },
    ...(sk ? [{ AttributeName: sk.name, KeyType: 'RANGE' as const }] : []),
  ];
  try {
    await client.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [...attributes.values()],
        KeySchema: keySchema(definition.partitionKey, definition.sortKey),
        ...(definition.globalIndexes
          ? {
              GlobalSecondaryIndexes: definition.globalIndexes.map((index) => ({
                IndexName: index.name,
                KeySchema: keySchema(index.partitionKey, index.sortKey),
                Projection: { ProjectionType: 'ALL' as const },
              })),
            }
          : {}),
      }),
    );
  } catch (error) {
    if (!(error instanceof ResourceInUseException)) throw error;
    await checkShape(client, name, definition);
    return;
  }
  if (definition.ttlAttribute) {
    await client.send(
      new UpdateTimeToLiveCommand({
        TableName: name,
        TimeToLiveSpecification: { AttributeName: definition.ttlAttribute, Enabled: true },
      }),
    );
  }
};

/**
 * An existing table (a persisted DATA_DIR) must have the keys and indexes this version reads: one of another shape
 * fails every call that touches it, far from its cause. Refused at start-up instead, saying which and how.
 */
const checkShape = async (
  client: DynamoDBClient,
  name: string,
  definition: TableDefinition,
): Promise<void> => {
  const { Table: table } = await client.send(new DescribeTableCommand({ TableName: name }));
  const typeOf = new Map((table?.AttributeDefinitions ?? []).map((a) => [a.AttributeName, a.AttributeType]));
  /** A key as `name:type:HASH,name:type:RANGE`. */
  const found = (schema: readonly KeySchemaElement[] | undefined) =>
    (schema ?? [])
      .map((k) => `${k.AttributeName}:${typeOf.get(k.AttributeName) ?? '?'}:${k.KeyType}`)
      .join(',');
  const wanted = (pk: KeyAttribute, sk?: KeyAttribute) =>
    [`${pk.name}:${pk.type}:HASH`, ...(sk ? [`${sk.name}:${sk.type}:RANGE`] : [])].join(',');
  const problems: string[] = [];
  const key = found(table?.KeySchema);
  if (key !== wanted(definition.partitionKey, definition.sortKey))
    problems.push(`its key is ${key || 'unknown'}`);
  const indexes = new Map(
    (table?.GlobalSecondaryIndexes ?? []).map((i) => [i.IndexName, found(i.KeySchema)]),
  );
  for (const index of definition.globalIndexes ?? []) {
    const indexKey = indexes.get(index.name);
    if (indexKey === undefined) problems.push(`it has no index ${index.name}`);
    else if (indexKey !== wanted(index.partitionKey, index.sortKey))
      problems.push(`its index ${index.name} is keyed ${indexKey}`);
  }
  if (problems.length > 0)
    throw new Error(
      `the existing table ${name} is not of the shape this version reads (${problems.join('; ')}): a DATA_DIR made ` +
        'by another version? Move it aside, or start without DATA_DIR',
    );
};

const createQueueWithDlq = async (client: SQSClient, prefix: string, visibilityTimeoutSeconds: number) => {
  const { settlement } = queues;
  const dlq = await client.send(
    new CreateQueueCommand({
      QueueName: physicalName(prefix, settlement.deadLetter.id),
      Attributes: { MessageRetentionPeriod: String(settlement.deadLetter.retentionSeconds) },
    }),
  );
  const dlqUrl = dlq.QueueUrl as string;
  const { Attributes } = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: dlqUrl, AttributeNames: ['QueueArn'] }),
  );
  const main = await client.send(
    new CreateQueueCommand({
      QueueName: physicalName(prefix, settlement.id),
      Attributes: {
        VisibilityTimeout: String(visibilityTimeoutSeconds),
        MessageRetentionPeriod: String(settlement.retentionSeconds),
        RedrivePolicy: JSON.stringify({
          deadLetterTargetArn: Attributes?.QueueArn,
          maxReceiveCount: settlement.deadLetter.maxReceiveCount,
        }),
      },
    }),
  );
  const mainAttributes = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: main.QueueUrl, AttributeNames: ['QueueArn'] }),
  );
  return {
    settlementQueueUrl: main.QueueUrl as string,
    settlementQueueArn: mainAttributes.Attributes?.QueueArn ?? '',
    settlementDlqUrl: dlqUrl,
  };
};
