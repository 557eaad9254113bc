import { randomBytes } from 'node:crypto';
import {
  type AttributeValue,
  ConditionalCheckFailedException,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import type { AccountDirectory, AccountProfile } from '#core/accounting.ts';
import { isWellFormedKey, KEY_PREFIX, publicPrefix, SECRET_LENGTH } from '#core/api-keys.ts';
import { DIMENSIONS, type Limits } from '#core/limits.ts';
import { hashKey, keyItemKey } from './dynamo-key-store.ts';

export type Tier = 'unverified' | 'trusted';

export interface Account {
  readonly id: string;
  readonly name: string;
  readonly tier: Tier;
  readonly createdAt: string;
  /** Volume accounts: limits that replace the tier's, dimension by dimension. */
  readonly quota: Partial<Limits> | null;
}

export interface ApiKeyInfo {
  readonly prefix: string;
  readonly name: string;
  readonly createdAt: string;
  readonly revokedAt: string | null;
}

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A new `svc_live_` key: 40 base62 characters from a CSPRNG (rejection sampling keeps them uniform). */
export const generateApiKey = (): string => {
  let secret = '';
  while (secret.length < SECRET_LENGTH) {
    for (const byte of randomBytes(64)) {
      // 248 = 4 × 62: bytes above it would bias the first characters.
      if (byte < 248 && secret.length < SECRET_LENGTH) secret += BASE62[byte % 62];
    }
  }
  return `${KEY_PREFIX}${secret}`;
};

export const newAccountId = (): string => `acct_${randomBytes(9).toString('base64url')}`;

const accountKey = (id: string) => ({ pk: { S: `acct#${id}` }, sk: { S: 'profile' } });

/**
 * Accounts and their API keys in the accounts table. Used by the admin CLI and the local host's seeding;
 * the request path only reads keys (dynamo-key-store.ts).
 * Account items: `pk = acct#<id>`, `sk = profile`.
 */
const quotaOf = (item: Record<string, AttributeValue> | undefined): Partial<Limits> | null => {
  const map = item?.quota?.M;
  if (!map) return null;
  const quota: Partial<Record<keyof Limits, number>> = {};
  for (const d of DIMENSIONS) if (map[d]?.N) quota[d] = Number(map[d].N);
  return quota;
};

/** An account item's tier and quota, as admission (and a change of limits) reads them. */
export const profileOf = (id: string, item: Record<string, AttributeValue>): AccountProfile => ({
  id,
  tier: item.tier?.S === 'trusted' ? 'trusted' : 'unverified',
  quota: quotaOf(item),
  limitsGen: Number(item.limitsGen?.N ?? 0),
});

export class DynamoAccounts implements AccountDirectory {
  readonly #client: DynamoDBClient;
  readonly #table: string;

  constructor(client: DynamoDBClient, table: string) {
    this.#client = client;
    this.#table = table;
  }

  /** Creates an account in the default tier; refuses an id that exists. */
  async createAccount(input: { id?: string; name?: string } = {}): Promise<Account> {
    const account: Account = {
      id: input.id ?? newAccountId(),
      name: input.name ?? '',
      tier: 'unverified',
      createdAt: new Date().toISOString(),
      quota: null,
    };
    await this.#client.send(
      new PutItemCommand({
        TableName: this.#table,
        Item: {
          ...accountKey(account.id),
          name: { S: account.name },
          tier: { S: account.tier },
          createdAt: { S: account.createdAt },
        },
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
    );
    return account;
  }

  /** Like createAccount, but an existing account is kept as it is (local seeding). */
  async ensureAccount(id: string, name: string): Promise<Account> {
    try {
      return await this.createAccount({ id, name });
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw error;
      const existing = await this.getAccount(id);
      if (!existing) throw error;
      return existing;
    }
  }

  async getAccount(id: string): Promise<Account | null> {
    const { Item } = await this.#client.send(
      new GetItemCommand({ TableName: this.#table, Key: accountKey(id), ConsistentRead: true }),
    );
    if (!Item) return null;
    return {
      id,
      name: Item.name?.S ?? '',
      tier: Item.tier?.S === 'trusted' ? 'trusted' : 'unverified',
      createdAt: Item.createdAt?.S ?? '',
      quota: quotaOf(Item),
    };
  }

  /** What admission needs (cached per instance by the gateway). */
  async findAccount(id: string): Promise<AccountProfile | null> {
    const { Item } = await this.#client.send(
      new GetItemCommand({
        TableName: this.#table,
        Key: accountKey(id),
        ProjectionExpression: 'tier, quota, limitsGen',
        // Strongly consistent: admission reloads a profile when the buckets say its limits changed, and an
        // eventually consistent read could return the old one again.
        ConsistentRead: true,
      }),
    );
    return Item ? profileOf(id, Item) : null;
  }

  /**
   * Stores a key for an account — a new random one unless `key` is given — and returns it. This is the
   * only moment the plaintext exists outside the client: only its hash and public prefix are written.
   */
  async createKey(
    accountId: string,
    options: { name?: string; key?: string } = {},
  ): Promise<{ key: string; info: ApiKeyInfo }> {
    if (!(await this.getAccount(accountId))) throw new Error(`No account ${accountId}`);
    const key = options.key ?? generateApiKey();
    if (!isWellFormedKey(key)) throw new Error('API keys are svc_live_ followed by 16–128 letters or digits');
    const info: ApiKeyInfo = {
      prefix: publicPrefix(key),
      name: options.name ?? '',
      createdAt: new Date().toISOString(),
      revokedAt: null,
    };
    try {
      await this.#client.send(
        new PutItemCommand({
          TableName: this.#table,
          Item: {
            ...keyItemKey(hashKey(key)),
            accountId: { S: accountId },
            prefix: { S: info.prefix },
            name: { S: info.name },
            createdAt: { S: info.createdAt },
            gsi1pk: { S: `acct#${accountId}` },
            gsi1sk: { S: `key#${info.prefix}#${info.createdAt}` },
          },
          // A key (hash) belongs to one account forever; re-adding it to the same account is harmless — unless
          // it was revoked: a revocation is for good (writing the item again would have erased it).
          ConditionExpression:
            'attribute_not_exists(pk) OR (accountId = :account AND attribute_not_exists(revokedAt))',
          ExpressionAttributeValues: { ':account': { S: accountId } },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) {
        if (error.Item?.accountId?.S === accountId)
          throw new Error('That key was revoked; it cannot be used again');
        throw new Error('That key belongs to another account');
      }
      throw error;
    }
    return { key, info };
  }

  async listKeys(accountId: string): Promise<ApiKeyInfo[]> {
    const keys: ApiKeyInfo[] = [];
    let start: Record<string, AttributeValue> | undefined;
    do {
      const page = await this.#client.send(
        new QueryCommand({
          TableName: this.#table,
          IndexName: 'gsi1',
          KeyConditionExpression: 'gsi1pk = :pk AND begins_with(gsi1sk, :key)',
          ExpressionAttributeValues: { ':pk': { S: `acct#${accountId}` }, ':key': { S: 'key#' } },
          ExclusiveStartKey: start,
        }),
      );
      for (const item of page.Items ?? []) {
        keys.push({
          prefix: item.prefix?.S ?? '',
          name: item.name?.S ?? '',
          createdAt: item.createdAt?.S ?? '',
          revokedAt: item.revokedAt?.S ?? null,
        });
      }
      start = page.LastEvaluatedKey;
    } while (start);
    return keys;
  }

  /**
   * Revokes the account's keys with this public prefix. Returns how many this call revoked (0 when none
   * matched or they were already revoked). Takes effect within the gateway's key cache TTL.
   */
  async revokeKey(accountId: string, prefix: string): Promise<number> {
    const page = await this.#client.send(
      new QueryCommand({
        TableName: this.#table,
        IndexName: 'gsi1',
        KeyConditionExpression: 'gsi1pk = :pk AND begins_with(gsi1sk, :key)',
        ExpressionAttributeValues: { ':pk': { S: `acct#${accountId}` }, ':key': { S: `key#${prefix}#` } },
      }),
    );
    let revoked = 0;
    for (const item of page.Items ?? []) {
      if (item.revokedAt || !item.pk || !item.sk) continue;
      try {
        await this.#client.send(
          new UpdateItemCommand({
            TableName: this.#table,
            Key: { pk: item.pk, sk: item.sk },
            UpdateExpression: 'SET revokedAt = :now',
            // The first revocation's time stands: a later one must not move it.
            ConditionExpression: 'attribute_exists(pk) AND attribute_not_exists(revokedAt)',
            ExpressionAttributeValues: { ':now': { S: new Date().toISOString() } },
          }),
        );
      } catch (error) {
        // Revoked since the listing (another `keys revoke` racing this one): already what was asked, and counted so.
        // Failing here would leave the keys after this one unrevoked.
        if (!(error instanceof ConditionalCheckFailedException)) throw error;
      }
      revoked++;
    }
    return revoked;
  }
}
