import { CfnOutput, Duration, RemovalPolicy, Stack, type StackProps } from 'aws-cdk-lib';
import { Alarm, ComparisonOperator, TreatMissingData } from 'aws-cdk-lib/aws-cloudwatch';
import { SnsAction } from 'aws-cdk-lib/aws-cloudwatch-actions';
import { AttributeType, Billing, type ITableV2, TableV2 } from 'aws-cdk-lib/aws-dynamodb';
import { PolicyStatement, ServicePrincipal } from 'aws-cdk-lib/aws-iam';
import { type ISecret, Secret } from 'aws-cdk-lib/aws-secretsmanager';
import { type ITopic, Topic } from 'aws-cdk-lib/aws-sns';
import { EmailSubscription } from 'aws-cdk-lib/aws-sns-subscriptions';
import { type IQueue, Queue, QueueEncryption } from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { keptInProduction } from './removal.ts';
import { type KeyAttribute, physicalName, queues, type TableId, tables } from './resources.ts';

export interface DataStackProps extends StackProps {
  /** Stage name, prefixed to every physical name (`svc-<stage>-accounts`). */
  readonly stage: string;
  /** Production stages keep tables and the bucket when the stack is deleted, and refuse table deletion. */
  readonly production: boolean;
  /** Secrets Manager secrets to create for upstream keys, by the name deployments reference (default none). */
  readonly providerSecrets?: readonly string[];
  /** Subscribed to the alarm topic. */
  readonly alarmEmail?: string;
}

/** Age of the oldest queued settlement that raises an alarm: a third of the 30-minute hold TTL. */
export const SETTLEMENT_AGE_ALARM_SECONDS = 600;

const attribute = (key: KeyAttribute) => ({
  name: key.name,
  type: key.type === 'S' ? AttributeType.STRING : AttributeType.NUMBER,
});

/**
 * The stateful resources and what every other stack shares: the tables and the settlement queue with its
 * dead-letter queue — built from the shared definitions in resources.ts, the same objects the local host
 * creates in the emulators — the upstream provider secrets, and the alarm topic with the DLQ alarm.
 * The site bucket lives with its CloudFront distribution (site-stack.ts), see ADR 0007.
 */
export class DataStack extends Stack {
  readonly tables: Readonly<Record<TableId, ITableV2>>;
  readonly settlementQueue: IQueue;
  readonly settlementDlq: IQueue;
  readonly providerSecrets: readonly ISecret[];
  readonly alarmTopic: ITopic;

  constructor(scope: Construct, id: string, props: DataStackProps) {
    super(scope, id, props);
    const prefix = `svc-${props.stage}`;
    const removalPolicy = props.production ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY;
    const kept = keptInProduction(props.production);

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
      // Settlements not yet debited: a deleted or replaced stack must not take them along in production.
      removalPolicy: kept,
    });
    this.settlementQueue = new Queue(this, 'settlement-queue', {
      queueName: physicalName(prefix, settlement.id),
      visibilityTimeout: Duration.seconds(settlement.visibilityTimeoutSeconds),
      retentionPeriod: Duration.seconds(settlement.retentionSeconds),
      deadLetterQueue: { queue: this.settlementDlq, maxReceiveCount: settlement.deadLetter.maxReceiveCount },
      encryption: QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      removalPolicy: kept,
    });

    const secretIds = new Set<string>();
    this.providerSecrets = (props.providerSecrets ?? []).map((secretName) => {
      // The construct id follows the name, so reordering the list never replaces a secret.
      const id = `secret-${secretName.replace(/[^A-Za-z0-9]+/g, '-')}`;
      if (secretIds.has(id)) throw new Error(`provider secret names collide once sanitized: ${secretName}`);
      secretIds.add(id);
      // Created with a random placeholder value; the operator puts the real key (README, "Deploy to AWS").
      const secret = new Secret(this, id, {
        secretName,
        description: `Upstream API key; deployments reference it as secretsmanager:${secretName}`,
        removalPolicy: kept,
      });
      new CfnOutput(this, `${id}-name`, { value: secretName });
      return secret;
    });

    // Tables last: they are kept even from a failed first create's rollback (deletion protection refuses its delete),
    // so the likeliest first failure — a secret name the account already has (README) — must come before them.
    for (const table of Object.values(built)) {
      table.node.addDependency(this.settlementQueue, this.settlementDlq, ...this.providerSecrets);
    }

    this.alarmTopic = new Topic(this, 'alarm-topic', { topicName: `${prefix}-alarms`, enforceSSL: true });
    // enforceSSL writes a topic policy, and a topic policy replaces SNS's default one — the one that let this
    // account's CloudWatch alarms publish. Without this statement every alarm would fire into the void.
    this.alarmTopic.addToResourcePolicy(
      new PolicyStatement({
        sid: 'CloudWatchAlarmsOfThisStagePublish',
        principals: [new ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [this.alarmTopic.topicArn],
        conditions: {
          StringEquals: { 'aws:SourceAccount': this.account },
          ArnLike: {
            'aws:SourceArn': `arn:${this.partition}:cloudwatch:${this.region}:${this.account}:alarm:${prefix}-*`,
          },
        },
      }),
    );
    if (props.alarmEmail) this.alarmTopic.addSubscription(new EmailSubscription(props.alarmEmail));
    // Any message in the DLQ is a settlement that failed five times: money not yet debited. Never routine.
    new Alarm(this, 'settlement-dlq-alarm', {
      alarmName: `${prefix}-settlement-dlq-depth`,
      alarmDescription:
        'Settlement messages in the dead-letter queue (poison or repeated store faults): calls served, not debited. ' +
        "Read the settlement consumer's errors, fix the cause, then redrive the DLQ to the settlement queue " +
        '(aws sqs start-message-move-task; settling is idempotent) within 14 days. README: "When the settlement DLQ ' +
        'alarm fires".',
      metric: this.settlementDlq.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(5),
        statistic: 'Maximum',
      }),
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new SnsAction(this.alarmTopic));

    // Settlements waiting long is the warning before the DLQ: a throttled or failing consumer. Past the hold TTL
    // the sweeper frees holds whose charges are still queued (they land as debt), so alarm well before it.
    new Alarm(this, 'settlement-age-alarm', {
      alarmName: `${prefix}-settlement-queue-age`,
      alarmDescription:
        'The oldest settlement message has waited over 10 minutes (consumer throttled or failing)',
      metric: this.settlementQueue.metricApproximateAgeOfOldestMessage({
        period: Duration.minutes(5),
        statistic: 'Maximum',
      }),
      threshold: SETTLEMENT_AGE_ALARM_SECONDS,
      evaluationPeriods: 1,
      comparisonOperator: ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new SnsAction(this.alarmTopic));

    // What the admin CLI and the registry loader need (README, "Deploy to AWS").
    for (const [id, definition] of Object.entries(tables) as [TableId, (typeof tables)[TableId]][]) {
      new CfnOutput(this, `${id}-table-name`, {
        value: this.tables[id].tableName,
        description: definition.envVar,
      });
    }
    new CfnOutput(this, 'settlement-queue-url', {
      value: this.settlementQueue.queueUrl,
      description: settlement.envVar,
    });
    // A redrive names both queues by ARN (README, "When the settlement DLQ alarm fires").
    new CfnOutput(this, 'settlement-queue-arn', {
      value: this.settlementQueue.queueArn,
      description: 'the settlement queue: a DLQ redrive destination',
    });
    new CfnOutput(this, 'settlement-dlq-arn', {
      value: this.settlementDlq.queueArn,
      description: 'the settlement DLQ: a redrive source',
    });
  }
}
