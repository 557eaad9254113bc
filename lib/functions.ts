/**
 * The function table: one row per handler file in `functions/`, saying what triggers it and which tables,
 * queues, buckets and secrets it uses. The stacks build everything from it — the function with its defaults,
 * its triggers (Function URL and API route, queue, schedule), its grants and its environment — so wiring a
 * new handler is one row. Plain data: importable without `aws-cdk-lib` (the infra tests read it too).
 */

import { HOLD_NOT_RELEASED } from '#core/accounting.ts';
import { ENDPOINT_PATHS, MODELS_PATH } from '#core/endpoints.ts';
import { MAX_SYNCED_RISE } from '#core/price-floor.ts';
import { PRICE_LIST_UNAVAILABLE, PRICE_SYNC_REFUSED_PREFIX } from '#core/price-sync.ts';
import { UPTIME_ROUND_FAILED } from '#core/uptime-probe.ts';
import { buckets, type queues, settlementConsumerTimeoutSeconds, type TableId } from './resources.ts';
import type { ScheduleId } from './stage.ts';

export type QueueId = keyof typeof queues;
export type BucketId = keyof typeof buckets;

/**
 * The DynamoDB actions a function may take on a table: exactly what its code does there, no more (least privilege:
 * a flaw in a public function must not scan the key hashes or delete ledger entries). A transaction needs each of
 * its items' own action (Put → PutItem, Update → UpdateItem, Delete → DeleteItem, ConditionCheck →
 * ConditionCheckItem); a refusal's `ALL_OLD` item is a read (GetItem). The local host enforces these lists on every
 * call a function makes (bin/local/table-grants.ts), so the tests prove them.
 */
export type TableAction =
  | 'GetItem'
  | 'Query'
  | 'Scan'
  | 'PutItem'
  | 'UpdateItem'
  | 'DeleteItem'
  | 'ConditionCheckItem'
  | 'BatchWriteItem';
export type TableAccess = readonly TableAction[];
/** `write`: put objects only (a report writer cannot read or delete what else is in the bucket). */
export type BucketAccess = 'read' | 'write' | 'readWrite';

export interface Uses {
  readonly tables?: Readonly<Partial<Record<TableId, TableAccess>>>;
  /** Queues the function sends to (a queue that triggers the function is its `trigger`, not a use). */
  readonly sendsTo?: readonly QueueId[];
  readonly buckets?: Readonly<Partial<Record<BucketId, BucketAccess>>>;
  /** The object keys (a pattern, e.g. `usage.json`) a bucket's writes are limited to; default every object. */
  readonly bucketObjects?: Readonly<Partial<Record<BucketId, string>>>;
  /** Reads the upstream provider keys (`secretsmanager:` references of the registry's deployments). */
  readonly providerSecrets?: boolean;
  /** Calls the public API from outside, through its CDN (`PROBE_BASE_URL`): the uptime probe. */
  readonly publicApi?: boolean;
}

export interface Route {
  readonly method: 'GET' | 'POST';
  /** API path, `{name}` for a path parameter, e.g. `/v1/models/{id}`. */
  readonly path: string;
}

export type Trigger =
  | { readonly kind: 'http'; readonly routes: readonly Route[] }
  | { readonly kind: 'queue'; readonly queue: QueueId }
  | { readonly kind: 'schedule'; readonly schedule: ScheduleId };

/**
 * An alarm on log lines whose message begins with `prefix`: what a function catches and logs instead of failing (a
 * failed invocation has the error alarm every function gets), when an operator must act on it.
 */
export interface LogAlarm {
  /** Names the metric filter, the metric and the alarm (`<function>-<id>`). */
  readonly id: string;
  readonly prefix: string;
  /** Such lines in a period (5 minutes unless `periodMinutes`) that make the period breach. */
  readonly threshold: number;
  /**
   * Minutes, or `run`: the interval of the function's schedule (a `rate(…)`; a `cron(…)` is refused at synth), for
   * an alarm that counts runs — with a fixed period, a slower schedule leaves periods without data, which never
   * breach, and "3 of 3" would never come.
   */
  readonly periodMinutes?: number | 'run';
  /** Breaching periods among the last `evaluationPeriods` that raise it (default 1 of 1). */
  readonly datapointsToAlarm?: number;
  readonly evaluationPeriods?: number;
  /** What it means and what to do, after the function's name in the alarm's description. */
  readonly description: string;
}

export interface FunctionDefinition {
  readonly trigger: Trigger;
  readonly uses: Uses;
  readonly logAlarms?: readonly LogAlarm[];
  /** Default: 300 s for HTTP functions, 60 s otherwise. */
  readonly timeoutSeconds?: number;
  /** Default: 1024 MB for HTTP functions (CPU scales with memory), 512 MB otherwise. */
  readonly memoryMb?: number;
}

/** `http('POST /v1/embeddings')` (paths from core/endpoints.ts), several routes for one function allowed. */
export const http = (...routes: `${Route['method']} /${string}`[]): Trigger => ({
  kind: 'http',
  routes: routes.map((route) => {
    const [method, path] = route.split(' ') as [Route['method'], string];
    return { method, path };
  }),
});
export const queue = (id: QueueId): Trigger => ({ kind: 'queue', queue: id });
export const schedule = (id: ScheduleId): Trigger => ({ kind: 'schedule', schedule: id });

/**
 * What every billed endpoint touches: key and account lookups, the registry, the limit buckets and the wallet
 * (admission's one transaction), the settlement queue, and the provider keys. Usage aggregates are written
 * by the settlement consumer, not here.
 */
const inference: Uses = {
  tables: {
    // Key and account lookups.
    accounts: ['GetItem'],
    // The catalog: a scan of models and deployments.
    registry: ['Scan'],
    // Admission's transaction: the buckets' update, the wallet's debit and the hold's put, read back on a refusal.
    buckets: ['GetItem', 'UpdateItem'],
    wallet: ['GetItem', 'PutItem', 'UpdateItem'],
  },
  sendsTo: ['settlement'],
  providerSecrets: true,
};

/** Keyed by handler file: row `x` is `functions/x.ts`, exporting `handler`. */
export const functions = {
  'chat-completions': {
    trigger: http(`POST ${ENDPOINT_PATHS['chat.completions']}`),
    uses: inference,
    timeoutSeconds: 900,
  },
  // The HTTP default (300 s): above the upstream completion timeout (180 s), so a slow upstream ends the call
  // with an answer and a settlement rather than Lambda killing it unrecorded.
  embeddings: { trigger: http(`POST ${ENDPOINT_PATHS.embeddings}`), uses: inference },
  'audio-transcriptions': {
    trigger: http(`POST ${ENDPOINT_PATHS['audio.transcriptions']}`),
    uses: inference,
  },
  // Speech streams its audio as it is made: 4,096 characters at speed 0.25 is some 18 minutes of it, and a client
  // reading slowly holds the relay. Cut at the function's end, the client would pay for every character with
  // part of the audio in hand: it gets chat's 15 minutes.
  'audio-speech': {
    trigger: http(`POST ${ENDPOINT_PATHS['audio.speech']}`),
    uses: inference,
    timeoutSeconds: 900,
  },
  models: {
    trigger: http(`GET ${MODELS_PATH}`, `GET ${MODELS_PATH}/{id}`),
    uses: { tables: { accounts: ['GetItem'], registry: ['Scan'] } },
    timeoutSeconds: 30,
  },
  settlement: {
    trigger: queue('settlement'),
    // One transaction per settlement: the marker and ledger puts, the hold's delete, the wallet's and the
    // buckets' updates, the usage aggregates and the fault; a shortfall's retry reads the wallet.
    uses: {
      tables: {
        wallet: ['GetItem', 'PutItem', 'UpdateItem', 'DeleteItem'],
        buckets: ['UpdateItem'],
        usage: ['PutItem', 'UpdateItem'],
      },
    },
    // The queue's visibility timeout is six times this (resources.ts): keep the two from one constant.
    timeoutSeconds: settlementConsumerTimeoutSeconds,
  },
  'hold-sweeper': {
    trigger: schedule('holdSweeper'),
    // Expired holds by their index, each released (deleted, its amount back to `available`) in a transaction;
    // on a wallet that owes (its update's failed condition returns the wallet: GetItem), the same transaction pays
    // the debt from what the release frees, with an arrears ledger entry.
    uses: { tables: { wallet: ['Query', 'GetItem', 'PutItem', 'UpdateItem', 'DeleteItem'] } },
    // A hold it cannot release is logged and the sweep goes on, succeeding: the errors alarm never sees it, while
    // the customer's money stays held (402s). One-off contention clears by the next sweep; three sweeps of four do not.
    logAlarms: [
      {
        id: 'holds-not-released',
        prefix: HOLD_NOT_RELEASED,
        threshold: 1,
        // Three of the last four sweeps: a run logging a moment late lands in the next period.
        periodMinutes: 'run',
        datapointsToAlarm: 3,
        evaluationPeriods: 4,
        description:
          "expired holds could not be released in 3 of the last 4 sweeps: customers' money stays held; the " +
          'warnings name the holds and the error',
      },
    ],
  },
  'price-sync': {
    trigger: schedule('priceSync'),
    // Reads providers' price lists with their keys; writes each deployment's synced price, an item of its own.
    uses: { tables: { registry: ['Scan', 'PutItem'] }, providerSecrets: true },
    timeoutSeconds: 300,
    logAlarms: [
      {
        id: 'refused-prices',
        prefix: PRICE_SYNC_REFUSED_PREFIX,
        threshold: 1,
        description:
          `a provider listed a price over ${MAX_SYNCED_RISE}× a deployment's configured cost, and the sync kept the ` +
          'old one: check the list, and raise the configured cost if the price is real',
      },
      {
        // Its costs are kept meanwhile: should the provider raise its prices, the price floor would not follow, and
        // calls would sell below cost. Three failed syncs of four is no blip.
        id: 'unread-price-lists',
        prefix: PRICE_LIST_UNAVAILABLE,
        threshold: 1,
        periodMinutes: 'run',
        datapointsToAlarm: 3,
        evaluationPeriods: 4,
        description:
          "a provider's price list could not be read in 3 of the last 4 syncs, so the price floor follows no " +
          'price change of it: the warnings name the provider and the error (its key, its endpoint)',
      },
    ],
  },
  'usage-report': {
    trigger: schedule('usageReport'),
    // It writes usage.json and nothing else: the status page's own files are the deployment's, not its. It reads
    // the report online first (a run never puts an older report over a newer one); the bucket holds only what the
    // site serves to anyone.
    uses: {
      tables: { usage: ['Query'], registry: ['Scan'] },
      buckets: { site: 'readWrite' },
      bucketObjects: { site: buckets.site.usageReportKey },
    },
    timeoutSeconds: 300,
  },
  'uptime-probe': {
    trigger: schedule('uptimeProbe'),
    // Asks the public API (a preflight per endpoint, a key lookup with a key nobody has) and sets the round's
    // failed checks in the minute counters; it reads nothing there and touches nothing else.
    uses: { tables: { usage: ['UpdateItem'] }, publicApi: true },
    // The default 60 s: a check that fails takes up to 10 s, 2 s of pause and 10 s again, all checks at once.
    // The alarms on errors and 5xx rates see only calls that reached a function; this sees the ones that did not.
    // A failed round in 3 of the last 5 minutes, as the incident rule asks of a check: one blip is no outage.
    logAlarms: [
      {
        id: 'failed-rounds',
        prefix: UPTIME_ROUND_FAILED,
        threshold: 1,
        periodMinutes: 1,
        datapointsToAlarm: 3,
        evaluationPeriods: 5,
        description:
          'the public API failed uptime checks (preflights, a key lookup) in 3 of the last 5 minutes; ' +
          'the failed checks are the warnings before each round',
      },
    ],
  },
} as const satisfies Record<string, FunctionDefinition>;

export type FunctionId = keyof typeof functions;

/** The handler file of a row, relative to the repository root. */
/**
 * The REST API's binary media types: every request body reaches a function base64-encoded, its bytes unchanged. A
 * body matching none is handed over as UTF-8 text, which mangles bytes that are not: transcription uploads, and any
 * compressed body (`Content-Encoding: gzip`, `deflate` or `br`, README) whatever its Content-Type says. The handlers
 * decode base64 bodies; responses stream (ResponseTransferMode.STREAM) and are passed on as they are written.
 */
export const REST_BINARY_MEDIA_TYPES: readonly string[] = ['*/*'];

export const entryOf = (id: string): string => `functions/${id}.ts`;

export const timeoutOf = (definition: FunctionDefinition): number =>
  definition.timeoutSeconds ?? (definition.trigger.kind === 'http' ? 300 : 60);

export const memoryOf = (definition: FunctionDefinition): number =>
  definition.memoryMb ?? (definition.trigger.kind === 'http' ? 1024 : 512);
