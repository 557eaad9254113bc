/**
 * The one definition of every table, queue and bucket the service uses.
 *
 * Both the CDK stacks (`lib/*-stack.ts`) and the local host (`bin/local/`) build their resources from
 * these objects, so the key schema a handler relies on cannot drift between AWS and the emulators.
 * This module is plain data on purpose: it must be importable without `aws-cdk-lib`.
 */

export type AttributeType = 'S' | 'N';

export interface KeyAttribute {
  readonly name: string;
  readonly type: AttributeType;
}

export interface IndexDefinition {
  readonly name: string;
  readonly partitionKey: KeyAttribute;
  readonly sortKey?: KeyAttribute;
}

export interface TableDefinition {
  /** Logical id, also the physical name's suffix. */
  readonly id: string;
  /** Environment variable through which a function receives the physical table name. */
  readonly envVar: string;
  readonly partitionKey: KeyAttribute;
  readonly sortKey?: KeyAttribute;
  readonly globalIndexes?: readonly IndexDefinition[];
  /** Attribute holding an epoch-seconds expiry; DynamoDB TTL deletes the item some time after it. */
  readonly ttlAttribute?: string;
}

export interface QueueDefinition {
  readonly id: string;
  readonly envVar: string;
  /** Must be at least six times the consumer's timeout (AWS guidance for Lambda event sources). */
  readonly visibilityTimeoutSeconds: number;
  readonly retentionSeconds: number;
  readonly deadLetter: {
    readonly id: string;
    readonly maxReceiveCount: number;
    readonly retentionSeconds: number;
  };
}

export interface BucketDefinition {
  readonly id: string;
  readonly envVar: string;
  /** The one object the usage-report function writes (and the CDN serves at `/<key>`). */
  readonly usageReportKey?: string;
}

const pk: KeyAttribute = { name: 'pk', type: 'S' };
const sk: KeyAttribute = { name: 'sk', type: 'S' };

/**
 * Every table uses a generic `pk`/`sk` pair; item kinds are distinguished by key prefixes
 * (`acct#…`, `key#…`, `hold#…`), documented next to the adapter that writes them.
 */
export const tables = {
  /** Accounts (profile, tier, custom quota) and API-key hashes. */
  accounts: {
    id: 'accounts',
    envVar: 'ACCOUNTS_TABLE',
    partitionKey: pk,
    sortKey: sk,
    // Lists an account's keys without a scan; only key items carry gsi1 attributes (sparse index).
    globalIndexes: [
      { name: 'gsi1', partitionKey: { name: 'gsi1pk', type: 'S' }, sortKey: { name: 'gsi1sk', type: 'S' } },
    ],
  },
  /** Rate-limit state: one GCRA item per account. */
  buckets: { id: 'buckets', envVar: 'BUCKETS_TABLE', partitionKey: pk, sortKey: sk },
  /** Balances, holds, ledger entries and settlement idempotency records (which expire; money items never do). */
  wallet: {
    id: 'wallet',
    envVar: 'WALLET_TABLE',
    partitionKey: pk,
    sortKey: sk,
    ttlAttribute: 'ttl',
    // Open holds by expiry, for the sweeper; sharded partition keys keep writes spread.
    globalIndexes: [
      { name: 'gsi1', partitionKey: { name: 'gsi1pk', type: 'S' }, sortKey: { name: 'gsi1sk', type: 'S' } },
    ],
  },
  /** Models, deployments and prices. */
  registry: { id: 'registry', envVar: 'REGISTRY_TABLE', partitionKey: pk, sortKey: sk },
  /** Usage aggregates, faults and incidents for the public report; old rows expire. */
  usage: { id: 'usage', envVar: 'USAGE_TABLE', partitionKey: pk, sortKey: sk, ttlAttribute: 'ttl' },
} as const satisfies Record<string, TableDefinition>;

/** The settlement consumer's Lambda timeout; the queue's visibility timeout is derived from it. */
export const settlementConsumerTimeoutSeconds = 30;

export const queues = {
  settlement: {
    id: 'settlement',
    envVar: 'SETTLEMENT_QUEUE_URL',
    visibilityTimeoutSeconds: settlementConsumerTimeoutSeconds * 6,
    retentionSeconds: 4 * 24 * 3600,
    // A message that fails five receives is poison: park it for inspection instead of retrying forever.
    deadLetter: { id: 'settlement-dlq', maxReceiveCount: 5, retentionSeconds: 14 * 24 * 3600 },
  },
} as const satisfies Record<string, QueueDefinition>;

export const buckets = {
  /** Static status page and `usage.json`, served at the site root. */
  site: { id: 'site', envVar: 'SITE_BUCKET', usageReportKey: 'usage.json' },
} as const satisfies Record<string, BucketDefinition>;

export type TableId = keyof typeof tables;

/** Physical name of a resource for a stage or test run, e.g. `svc-dev-accounts`. */
export const physicalName = (prefix: string, id: string): string => (prefix ? `${prefix}-${id}` : id);
