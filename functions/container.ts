import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { SQSClient, type SQSClientConfig } from '@aws-sdk/client-sqs';
import { musicMetadataProbe } from '#adapters/audio-probe.ts';
import { boundedRequests, hotPathClientConfig } from '#adapters/aws-clients.ts';
import { DynamoAccounting } from '#adapters/dynamo-accounting.ts';
import { DynamoAccounts } from '#adapters/dynamo-accounts.ts';
import { DynamoKeyStore, hashKey } from '#adapters/dynamo-key-store.ts';
import { DynamoRegistry, RegistryCache } from '#adapters/dynamo-registry.ts';
import { disableAllocationSitePretenuring } from '#adapters/heap-tuning.ts';
import { createLogger, type Logger } from '#adapters/logger.ts';
import { defaultSecretResolver, type SecretResolver } from '#adapters/secrets.ts';
import { SqsSettlementSink } from '#adapters/sqs-settlement-sink.ts';
import { o200kTokenCounter } from '#adapters/tokenizer.ts';
import { AnthropicChat, anthropicAuth } from '#adapters/upstream/anthropic-chat.ts';
import { UpstreamHttp } from '#adapters/upstream/http.ts';
import { KeyRing } from '#adapters/upstream/key-ring.ts';
import { OpenAiCompatibleSpeech, OpenAiCompatibleTranscriptions } from '#adapters/upstream/openai-audio.ts';
import { OpenAiCompatibleChat } from '#adapters/upstream/openai-compatible.ts';
import { OpenAiCompatibleEmbeddings } from '#adapters/upstream/openai-embeddings.ts';
import { OpenAiHttp } from '#adapters/upstream/openai-http.ts';
import { OpenAiCompatiblePrices } from '#adapters/upstream/openai-prices.ts';
import type { AccountProfile } from '#core/accounting.ts';
import { Admission } from '#core/admission.ts';
import { Authenticator } from '#core/authenticator.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import { Gateway } from '#core/gateway.ts';
import { HealthBoard } from '#core/health.ts';
import type { Alarms, AudioProbe, Clock, Random, SettlementSink, Sleep, TokenCounter } from '#core/ports.ts';
import { RefreshingCache } from '#core/refreshing-cache.ts';
import type { AdapterName } from '#core/registry.ts';
import { cachedTokenCounter } from '#core/token-count-cache.ts';
import type { PriceSource, ProviderAdapter } from '#core/upstream.ts';
import { type Config, loadConfig } from './config.ts';

// Once per process, before any request: see heap-tuning.ts for the measurement.
disableAllocationSitePretenuring();

/** Everything a handler needs, built once per cold start (composition root). */
export interface Container {
  readonly config: Config;
  readonly log: Logger;
  readonly clock: Clock;
  readonly random: Random;
  /** Counts prompts, remembering texts seen before (system prompts and chat histories come again and again). */
  readonly tokens: TokenCounter;
  /** Counts a reply's output for an estimate: each reply is new, so nothing is remembered of it. */
  readonly outputTokens: TokenCounter;
  readonly audio: AudioProbe;
  readonly gateway: Gateway;
  readonly registry: RegistryCache;
  /** The registry table itself, for the functions that change it (price sync). */
  readonly registryStore: DynamoRegistry;
  /** A provider protocol's price list reader, or null when the protocol has none. */
  prices(adapter: AdapterName): PriceSource | null;
  readonly settlements: SettlementSink;
  readonly accounting: DynamoAccounting;
  readonly accounts: DynamoAccounts;
  /**
   * A deployment's provider protocol, for one capability. A protocol that lacks it fails the attempt, so a
   * misconfigured deployment is skipped by fallback rather than breaking the request.
   */
  provider<K extends keyof ProviderAdapter>(
    adapter: AdapterName,
    capability: K,
  ): NonNullable<ProviderAdapter[K]>;
  /** Releases pooled connections (tests and the local host; Lambda never calls it). */
  close(): Promise<void>;
}

export interface ContainerOptions {
  /**
   * Where `env:` secret references are looked up: the local host's and tests' environments. Without it (a
   * Lambda instance) `env:` references are refused: the process environment there holds the role's credentials.
   */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly secrets?: SecretResolver;
  readonly clock?: Clock;
  /** Explicit AWS client settings (the local host's emulator endpoints); Lambda uses the defaults. */
  readonly aws?: { readonly dynamodb?: DynamoDBClientConfig; readonly sqs?: SQSClientConfig };
  /** Where settlement records go instead of an inline SQS sink (the local host's sender thread). */
  readonly settlements?: SettlementSink;
  /**
   * Local host only, for the benchmark's metering-on/off comparison: skip admission (no limits, no hold).
   * Not reachable from a Lambda's environment, so a deployment cannot serve unmetered by misconfiguration.
   */
  readonly metering?: boolean;
  /** Local host only: instruments the DynamoDB client (its stand-in for the functions' IAM grants). */
  readonly onDynamoClient?: (client: DynamoDBClient) => void;
}

/**
 * Characters of message text whose token counts an instance remembers (token-count-cache.ts): at most ~4 MB of
 * strings beside the tokenizer's ~100 MB of tables, enough for a few hundred long system prompts and chat histories.
 */
const TOKEN_COUNT_CACHE_CHARS = 2_000_000;

export const createContainer = (config: Config, options: ContainerOptions = {}): Container => {
  const log = createLogger(config.logLevel);
  // Sub-millisecond wall time: admission's buckets are kept in µs, and Server-Timing reports fractions of ms.
  const clock: Clock = options.clock ?? { now: () => performance.timeOrigin + performance.now() };
  const random: Random = Math.random;
  const sleep: Sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const alarms: Alarms = {
    now: () => Date.now(),
    at: (when, fire) => {
      const timer = setTimeout(fire, Math.max(0, when - Date.now()));
      return () => clearTimeout(timer);
    },
  };
  // On Lambda, region and credentials come from the standard AWS_* environment.
  const dynamo = new DynamoDBClient({
    maxAttempts: 3,
    ...hotPathClientConfig(log),
    ...boundedRequests(),
    ...options.aws?.dynamodb,
  });
  options.onDynamoClient?.(dynamo);
  // TLS (or loopback) already protects the body; the SDK's extra MD5 check is pure CPU on the hot path.
  const sqs = new SQSClient({
    maxAttempts: 5,
    md5: false,
    ...hotPathClientConfig(log),
    ...boundedRequests(),
    ...options.aws?.sqs,
  });
  const registryStore = new DynamoRegistry(dynamo, config.tables.registry);
  const registry = new RegistryCache(
    registryStore,
    clock,
    config.registryRefreshMs,
    log,
    config.priceMinMargin,
  );
  const accounts = new DynamoAccounts(dynamo, config.tables.accounts);
  const accounting = new DynamoAccounting(
    dynamo,
    {
      wallet: config.tables.wallet,
      buckets: config.tables.buckets,
      usage: config.tables.usage,
      accounts: config.tables.accounts,
    },
    sleep,
    (message, fields) => log.warn(message, fields),
  );
  const admission =
    options.metering === false
      ? null
      : new Admission({
          store: accounting,
          accounts: new RefreshingCache<AccountProfile | null>({
            load: (id) => accounts.findAccount(id),
            clock,
            ttlMs: config.accountCacheTtlMs,
          }),
          clock,
          random,
          sleep,
          holdTtlMs: config.holdTtlMs,
        });
  const authenticator = new Authenticator({
    keys: new DynamoKeyStore(dynamo, config.tables.accounts),
    clock,
    hash: hashKey,
    ttlMs: config.keyCacheTtlMs,
  });
  const http = new UpstreamHttp(config.upstream.connectionsPerOrigin);
  const keys = new KeyRing(options.secrets ?? defaultSecretResolver(options.env));
  const openAi = new OpenAiHttp(http, keys, config.upstream);
  const adapters: Readonly<Record<AdapterName, ProviderAdapter>> = {
    'openai-compatible': {
      chat: new OpenAiCompatibleChat(openAi),
      embeddings: new OpenAiCompatibleEmbeddings(openAi),
      transcriptions: new OpenAiCompatibleTranscriptions(openAi),
      speech: new OpenAiCompatibleSpeech(openAi),
      prices: new OpenAiCompatiblePrices(keys),
    },
    anthropic: {
      chat: new AnthropicChat(new OpenAiHttp(http, keys, config.upstream, anthropicAuth)),
    },
  };
  return {
    config,
    log,
    clock,
    random,
    tokens: cachedTokenCounter(o200kTokenCounter, TOKEN_COUNT_CACHE_CHARS),
    outputTokens: o200kTokenCounter,
    audio: musicMetadataProbe,
    registry,
    registryStore,
    prices: (adapter) => adapters[adapter]?.prices ?? null,
    accounting,
    accounts,
    gateway: new Gateway({
      authenticator,
      admission,
      catalog: () => registry.catalog(),
      clock,
      alarms,
      random,
      maxAttempts: config.upstream.maxAttempts,
      health: new HealthBoard(config.health, clock),
      warn: (message, fields) => log.warn(message, fields),
    }),
    settlements:
      options.settlements ??
      new SqsSettlementSink(sqs, config.settlementQueueUrl, { lingerMs: config.settlementLingerMs }),
    provider: (adapter, capability) => {
      const provider = adapters[adapter]?.[capability];
      if (!provider)
        throw new UpstreamFailure('protocol', `the ${adapter} adapter cannot serve ${capability}`);
      return provider as NonNullable<ProviderAdapter[typeof capability]>;
    },
    close: async () => {
      await http.close();
      dynamo.destroy();
      sqs.destroy();
    },
  };
};

let fromEnv: Container | undefined;

/** The container of a Lambda instance, configured from its environment on first use. */
export const containerFromEnv = (): Container => {
  fromEnv ??= createContainer(loadConfig(process.env));
  return fromEnv;
};
