import { Duration, RemovalPolicy, Stack, type StackProps } from 'aws-cdk-lib';
import { AttributeType, Billing, type ITableV2, TableV2 } from 'aws-cdk-lib/aws-dynamodb';
import { BlockPublicAccess, Bucket, BucketEncryption, type IBucket } from 'aws-cdk-lib/aws-s3';
import { type IQueue, Queue, QueueEncryption } from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { buckets, type KeyAttribute, physicalName, queues, type TableId, tables } from './resources.ts';

export interface DataStackProps extends StackProps {
  /** Stage name, prefixed to every physical name (`svc-<stage>-accounts`). */
  readonly stage: string;
  /** Production stages keep tables and the bucket when the stack is deleted, and refuse table deletion. */
  readonly production: boolean;
}

const attribute = (key: KeyAttribute) => ({
  name: key.name,
  type: key.type === 'S' ? AttributeType.STRING : AttributeType.NUMBER,
});

/**
 * Tables, the settlement queue with its dead-letter queue, and the site bucket — built from the shared
 * definitions in resources.ts, the same objects the local host creates in the emulators.
 */
export class DataStack extends Stack {
  readonly tables: Readonly<Record<TableId, ITableV2>>;
  readonly settlementQueue: IQueue;
  readonly settlementDlq: IQueue;
  readonly siteBucket: IBucket;

  constructor(scope: Construct, id: string, props: DataStackProps) {
    super(scope, id, props);
    const prefix = `svc-${props.stage}`;
    const removalPolicy = props.production ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY;

    const built = {} as Record<TableId, ITableV2>;
    for (const [id, definition] of Object.entries(tables) as [TableId, (typeof tables)[TableId]][]) {
      built[id] = new TableV2(this, `${id}-table`, {
        tableName: physicalName(prefix, definition.id),
        partitionKey: attribute(definition.partitionKey),
        sortKey: attribute(definition.sortKey),
        billing: Billing.onDemand(),
        pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
        deletionProtection: props.production,
        removalPolicy,
        ...('ttlAttribute' in definition ? { timeToLiveAttribute: definition.ttlAttribute } : {}),
        ...('globalIndexes' in definition
          ? {
              globalSecondaryIndexes: definition.globalIndexes.map((index) => ({
                indexName: index.name,
                partitionKey: attribute(index.partitionKey),
                sortKey: attribute(index.sortKey),
              })),
            }
          : {}),
      });
    }
    this.tables = built;

    const { settlement } = queues;
    this.settlementDlq = new Queue(this, 'settlement-dlq', {
      queueName: physicalName(prefix, settlement.deadLetter.id),
      retentionPeriod: Duration.seconds(settlement.deadLetter.retentionSeconds),
      encryption: QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
    });
    this.settlementQueue = new Queue(this, 'settlement-queue', {
      queueName: physicalName(prefix, settlement.id),
      visibilityTimeout: Duration.seconds(settlement.visibilityTimeoutSeconds),
      retentionPeriod: Duration.seconds(settlement.retentionSeconds),
      deadLetterQueue: { queue: this.settlementDlq, maxReceiveCount: settlement.deadLetter.maxReceiveCount },
      encryption: QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
    });

    this.siteBucket = new Bucket(this, `${buckets.site.id}-bucket`, {
      blockPublicAccess: BlockPublicAccess.BLOCK_ALL,
      encryption: BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      removalPolicy,
      autoDeleteObjects: !props.production,
    });
  }
}
