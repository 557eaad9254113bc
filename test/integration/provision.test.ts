import { randomBytes } from 'node:crypto';
import { CreateTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { physicalName, tables } from '#lib/resources.ts';
import { localClientConfig } from '#local/emulators.ts';
import { provision } from '#local/provision.ts';

/**
 * Provisioning is idempotent, so a persisted DATA_DIR restarts on its own tables; a table there of another shape
 * (another version's) is refused at start-up, named, rather than failing every call that touches it.
 */
const emulators = inject('emulators');
const dynamo = new DynamoDBClient(localClientConfig(emulators.dynamodb));
afterAll(() => dynamo.destroy());

const prefix = () => `prov${randomBytes(4).toString('hex')}`;

describe('provision over existing tables', () => {
  it('takes tables of its own shape as they are: a second run over them is accepted', async () => {
    const p = prefix();
    const first = await provision(emulators, p);
    expect(await provision(emulators, p)).toEqual(first);
  });

  it('refuses a table keyed otherwise, or one without an index it reads, naming the table and what differs', async () => {
    const p = prefix();
    // The wallet keyed on its partition key alone (and without its index); the accounts table without its gsi1.
    await dynamo.send(
      new CreateTableCommand({
        TableName: physicalName(p, tables.wallet.id),
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
      }),
    );
    await expect(provision(emulators, p)).rejects.toThrow(
      `the existing table ${physicalName(p, tables.wallet.id)} is not of the shape this version reads (its key is pk:S:HASH; it has no index gsi1)`,
    );
    const q = prefix();
    await dynamo.send(
      new CreateTableCommand({
        TableName: physicalName(q, tables.accounts.id),
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
      }),
    );
    await expect(provision(emulators, q)).rejects.toThrow(
      /it has no index gsi1\): a DATA_DIR made by another version/,
    );
  });

  it('refuses a key of another type, and an index keyed otherwise', async () => {
    const keyed = (pkType: 'S' | 'N') => ({
      BillingMode: 'PAY_PER_REQUEST' as const,
      AttributeDefinitions: [
        { AttributeName: 'pk', AttributeType: pkType },
        { AttributeName: 'sk', AttributeType: 'S' as const },
      ],
      KeySchema: [
        { AttributeName: 'pk', KeyType: 'HASH' as const },
        { AttributeName: 'sk', KeyType: 'RANGE' as const },
      ],
    });
    const p = prefix();
    await dynamo.send(
      new CreateTableCommand({ TableName: physicalName(p, tables.buckets.id), ...keyed('N') }),
    );
    await expect(provision(emulators, p)).rejects.toThrow('(its key is pk:N:HASH,sk:S:RANGE)');
    const q = prefix();
    const accounts = keyed('S');
    await dynamo.send(
      new CreateTableCommand({
        TableName: physicalName(q, tables.accounts.id),
        ...accounts,
        AttributeDefinitions: [
          ...accounts.AttributeDefinitions,
          { AttributeName: 'gsi1pk', AttributeType: 'S' },
        ],
        // gsi1 on its partition key alone: the listing's sort key is missing.
        GlobalSecondaryIndexes: [
          {
            IndexName: 'gsi1',
            KeySchema: [{ AttributeName: 'gsi1pk', KeyType: 'HASH' }],
            Projection: { ProjectionType: 'ALL' },
          },
        ],
      }),
    );
    await expect(provision(emulators, q)).rejects.toThrow('(its index gsi1 is keyed gsi1pk:S:HASH)');
  });
});
