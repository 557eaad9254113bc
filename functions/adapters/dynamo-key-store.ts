import { hash } from 'node:crypto';
import { type DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import type { ApiKeyRecord, KeyStore } from '#core/ports.ts';

/**
 * SHA-256 hex of a whole API key: the only form in which keys are stored. Every request hashes its key; the one-shot
 * `hash` costs less than half of a `createHash` object's update and digest.
 */
export const hashKey = (key: string): string => hash('sha256', key, 'hex');

/**
 * Key items in the accounts table:
 * `pk = key#<sha256>`, `sk = key`, with `accountId`, `prefix`, `createdAt`, optional `name`, `revokedAt`,
 * and `gsi1pk = acct#<accountId>`, `gsi1sk = key#<prefix>` so an account's keys can be listed.
 */
export const keyItemKey = (hash: string) => ({ pk: { S: `key#${hash}` }, sk: { S: 'key' } });

export class DynamoKeyStore implements KeyStore {
  readonly #client: DynamoDBClient;
  readonly #table: string;

  constructor(client: DynamoDBClient, table: string) {
    this.#client = client;
    this.#table = table;
  }

  async findByHash(hash: string): Promise<ApiKeyRecord | null> {
    const { Item } = await this.#client.send(
      new GetItemCommand({
        TableName: this.#table,
        Key: keyItemKey(hash),
        ProjectionExpression: 'accountId, prefix, revokedAt',
      }),
    );
    const accountId = Item?.accountId?.S;
    if (!Item || !accountId) return null;
    return { accountId, prefix: Item.prefix?.S ?? '', revoked: Item.revokedAt !== undefined };
  }
}
