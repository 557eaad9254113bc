import { App } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { DataStack } from '#lib/data-stack.ts';
import { physicalName, queues, tables } from '#lib/resources.ts';

const synth = (production: boolean, providerSecrets: string[] = []) =>
  Template.fromStack(
    new DataStack(new App(), 'data', { stage: production ? 'prod' : 'dev', production, providerSecrets }),
  );

describe('the data stack', () => {
  const template = synth(false);

  it.each(Object.values(tables))(
    'builds table $id from the shared definition the local host uses',
    (definition) => {
      const keys = [definition.partitionKey, ...('sortKey' in definition ? [definition.sortKey] : [])];
      template.hasResourceProperties('AWS::DynamoDB::GlobalTable', {
        TableName: physicalName('svc-dev', definition.id),
        KeySchema: keys.map((k, i) => ({ AttributeName: k.name, KeyType: i === 0 ? 'HASH' : 'RANGE' })),
        BillingMode: 'PAY_PER_REQUEST',
        Replicas: [
          Match.objectLike({ PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true } }),
        ],
        ...('globalIndexes' in definition
          ? {
              GlobalSecondaryIndexes: definition.globalIndexes.map((index) =>
                Match.objectLike({
                  IndexName: index.name,
                  KeySchema: [
                    { AttributeName: index.partitionKey.name, KeyType: 'HASH' },
                    { AttributeName: index.sortKey.name, KeyType: 'RANGE' },
                  ],
                }),
              ),
            }
          : {}),
        ...('ttlAttribute' in definition
          ? { TimeToLiveSpecification: { AttributeName: definition.ttlAttribute, Enabled: true } }
          : {}),
      });
    },
  );

  it('redrives settlement messages to the DLQ after 5 receives, with a visibility timeout of 6× the consumer', () => {
    template.hasResourceProperties('AWS::SQS::Queue', {
      QueueName: 'svc-dev-settlement',
      VisibilityTimeout: queues.settlement.visibilityTimeoutSeconds,
      RedrivePolicy: { maxReceiveCount: 5, deadLetterTargetArn: Match.anyValue() },
    });
    expect(queues.settlement.visibilityTimeoutSeconds).toBeGreaterThanOrEqual(6 * 30);
  });

  it('says what to do when the DLQ alarm fires, and outputs both ARNs a redrive names', () => {
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'svc-dev-settlement-dlq-depth',
      AlarmDescription: Match.stringLikeRegexp('redrive the DLQ to the settlement queue.*within 14 days'),
    });
    const outputs = Object.keys(template.findOutputs('*'));
    expect(outputs).toEqual(expect.arrayContaining(['settlementqueuearn', 'settlementdlqarn']));
  });

  it('defines no table that resources.ts does not', () => {
    template.resourceCountIs('AWS::DynamoDB::GlobalTable', Object.keys(tables).length);
  });

  it('protects production tables from deletion', () => {
    synth(true).hasResourceProperties('AWS::DynamoDB::GlobalTable', {
      Replicas: [Match.objectLike({ DeletionProtectionEnabled: true })],
    });
  });

  it('keeps production tables and provider secrets when the stack is deleted, and not in other stages', () => {
    const production = synth(true, ['svc/provider-a/key-1']);
    production.resourceCountIs('AWS::DynamoDB::GlobalTable', Object.keys(tables).length);
    production.resourceCountIs('AWS::SecretsManager::Secret', 1);
    // The settlement queue and its DLQ hold settlements not yet debited: money, like the tables.
    production.resourceCountIs('AWS::SQS::Queue', 2);
    for (const resource of Object.values(production.findResources('AWS::DynamoDB::GlobalTable'))) {
      expect(resource.DeletionPolicy).toBe('Retain');
      expect(resource.UpdateReplacePolicy).toBe('Retain');
    }
    // Except from a failed first create's rollback, whose retry a kept resource's fixed name would make fail.
    for (const type of ['AWS::SecretsManager::Secret', 'AWS::SQS::Queue']) {
      for (const resource of Object.values(production.findResources(type))) {
        expect(resource.DeletionPolicy, type).toBe('RetainExceptOnCreate');
        expect(resource.UpdateReplacePolicy, type).toBe('Retain');
      }
    }
    for (const type of ['AWS::DynamoDB::GlobalTable', 'AWS::SQS::Queue'])
      for (const resource of Object.values(template.findResources(type)))
        expect(resource.DeletionPolicy).toBe('Delete');
  });

  it('creates the tables, which even a failed first create keeps, only once the secrets and queues exist', () => {
    const production = synth(true, ['svc/provider-a/key-1']);
    const others = [
      ...Object.keys(production.findResources('AWS::SecretsManager::Secret')),
      ...Object.keys(production.findResources('AWS::SQS::Queue')),
    ];
    expect(others).toHaveLength(3);
    for (const table of Object.values(production.findResources('AWS::DynamoDB::GlobalTable')))
      expect(table.DependsOn).toEqual(expect.arrayContaining(others));
  });

  it("lets this stage's CloudWatch alarms publish to the alarm topic, whose TLS-only policy replaces the default", () => {
    template.hasResourceProperties('AWS::SNS::TopicPolicy', {
      PolicyDocument: {
        // The TLS-only deny CDK writes, then ours.
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
          Match.objectLike({
            Effect: 'Allow',
            Principal: { Service: 'cloudwatch.amazonaws.com' },
            Action: 'sns:Publish',
            Condition: Match.objectLike({
              StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } },
            }),
          }),
        ]),
      },
    });
  });

  it('creates the provider secrets the stage names, as deployments reference them', () => {
    const secrets = synth(false, ['svc/provider-a/key-1', 'svc/provider-b/key-1']);
    secrets.resourceCountIs('AWS::SecretsManager::Secret', 2);
    secrets.hasResourceProperties('AWS::SecretsManager::Secret', { Name: 'svc/provider-a/key-1' });
    secrets.hasResourceProperties('AWS::SecretsManager::Secret', { Name: 'svc/provider-b/key-1' });
    template.resourceCountIs('AWS::SecretsManager::Secret', 0);
  });
});
