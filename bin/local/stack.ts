import { type AddressInfo, createServer } from 'node:net';
import type { DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { SQSClient, type SQSClientConfig } from '@aws-sdk/client-sqs';
import type { Clock } from '#core/ports.ts';
import { nanoToUsd } from '#core/pricing.ts';
import { type Config, loadConfig } from '#functions/config.ts';
import { type Container, createContainer } from '#functions/container.ts';
import type { PriceSyncResult } from '#functions/price-sync.ts';
import type { UptimeProbeSummary } from '#functions/uptime-probe.ts';
import type { UsageReportEvent, UsageReportSummary } from '#functions/usage-report.ts';
import { queues, tables } from '#lib/resources.ts';
import type { ConsumerWorkerInput } from './consumer-worker.ts';
import { type EmulatorEndpoints, localClientConfig, startEmulators } from './emulators.ts';
import { createInstanceServer, type DrainResult, loadRoutes } from './function-host.ts';
import { invocationContext } from './function-url.ts';
import type { InstanceRequest, InstanceWorkerInput } from './instance-worker.ts';
import { startLocalProbe } from './probe.ts';
import { type Provisioned, provision } from './provision.ts';
import { messagesLeft, waitForEmptyQueue } from './queue-drain.ts';
import { readRegistryFile } from './registry-file.ts';
import {
  DEMO_ACCOUNT_ID,
  externalDeployments,
  readCatalog,
  SIMULATOR_SECRETS,
  seed,
  simulatorDeployments,
  simulatorPrices,
} from './seed.ts';
import { replaceFormerSeed } from './seeded-registry.ts';
import { ThreadedSettlementSink } from './settlement-thread.ts';
import { startLocalSite } from './site.ts';
import { enforceTableGrants, invoking } from './table-grants.ts';
import { askWorker, type ServiceWorker, startServiceWorker } from './workers.ts';

export interface LocalStackOptions {
  /** Gateway port; 0 picks a free one. Default 8787. */
  readonly port?: number;
  readonly host?: string;
  /** Persist emulator data here (DynamoDB tables, S3 objects); in-memory when absent. */
  readonly dataDir?: string;
  /** Reuse running emulators (tests share one set) instead of starting them. */
  readonly emulators?: EmulatorEndpoints;
  /** Prefix of every table, queue and bucket name, isolating stacks that share emulators. */
  readonly prefix?: string;
  /**
   * Seed the registry from this registry file (docs/registry.md) instead of the catalog: it is validated
   * before anything starts, its `{{SIMULATOR_URL}}` is the simulator, and it replaces `upstreamBaseUrl`.
   */
  readonly registryFile?: string;
  /** Where the `env:` key references of a registry file resolve (npm start passes its own environment). */
  readonly secretEnv?: Readonly<Record<string, string | undefined>>;
  /** Point every seeded deployment at this OpenAI-compatible server; the simulator is then not started. */
  readonly upstreamBaseUrl?: string;
  readonly upstreamApiKey?: string;
  /** Upstream model name for every deployment at `upstreamBaseUrl` (default: the model's own id). */
  readonly upstreamModel?: string;
  /** Use an already running simulator (tests drive its faults) instead of starting one. */
  readonly simulatorUrl?: string;
  /** Added latency of a simulator started by the stack. */
  readonly simulatorLatencyMs?: number;
  readonly demoApiKey?: string;
  /** Top up the demo account's wallet with this many nano-dollars (once per amount; the first top-up makes it trusted). */
  readonly demoBalanceNano?: number;
  /** Extra function environment (LOG_LEVEL, timeouts, …), as a Lambda's configuration would set it. */
  readonly functionEnv?: Readonly<Record<string, string>>;
  /** Run the settlement consumer and the hold sweeper (default true; tests that drive them directly turn it off). */
  readonly consumers?: boolean;
  /** Settlement queue visibility timeout (tests shorten it to see redelivery). */
  readonly settlementVisibilityTimeoutSeconds?: number;
  /** How often the sweeper runs (default 60 s). */
  readonly sweepIntervalMs?: number;
  /** How often the price sync runs (default 10 minutes; 0 turns the schedule off). */
  readonly priceSyncIntervalMs?: number;
  /** How often the usage report is published (default 5 minutes with `consumers`, else 0: on demand only). */
  readonly usageReportIntervalMs?: number;
  /** How often the uptime probe asks the gateway (default 60 s with `consumers`, else 0: on demand only). */
  readonly uptimeProbeIntervalMs?: number;
  /** Benchmark only: serve without admission (no limits, no holds) to measure what metering costs. */
  readonly metering?: boolean;
  /** Tests: the gateway's clock (GCRA with an injected clock). */
  readonly clock?: Clock;
  /** Tests: extra DynamoDB client settings for the gateway (e.g. a request handler that fails on demand). */
  readonly dynamodbOverrides?: Partial<DynamoDBClientConfig>;
  readonly log?: (line: string) => void;
  /**
   * Gateway instances serving the port (default 1): the main thread's and `instances − 1` worker threads, each
   * with its own container, as concurrent Lambda instances are. Tests that reach into `container` use one.
   */
  readonly instances?: number;
  /**
   * Tests: Lambda timeouts (ms) per function name other than the deployed ones (lib/functions.ts), so a test can
   * see what a call does when its invocation runs out of time.
   */
  readonly functionTimeoutsMs?: Readonly<Record<string, number>>;
}

export interface LocalStack {
  readonly url: string;
  readonly demoApiKey: string;
  /** Demo keys an earlier start on the same DATA_DIR generated, revoked now that a new one is (see seed). */
  readonly revokedDemoKeys: number;
  /** What the demo wallet holds once the stack is up (its first top-up, or what a DATA_DIR kept). */
  readonly demoBalanceNano: number;
  /** Whether a demo wallet DATA_DIR kept was funded before, so this start's demo balance credited nothing. */
  readonly demoFundedBefore: boolean;
  readonly simulatorUrl: string | null;
  readonly emulators: EmulatorEndpoints;
  readonly resources: Provisioned;
  readonly config: Config;
  readonly container: Container;
  /**
   * Resolves, with why, if a part the stack started — DynamoDB Local, the SQS/S3 emulators, the simulator, the
   * settlement sender or the consumer — ends before stop(): the gateway would go on answering around it (every
   * metered call refused, or served and never settled). Never resolves otherwise.
   */
  readonly lost: Promise<Error>;
  /** Runs the scheduled price sync now (it also runs every `priceSyncIntervalMs`). */
  priceSync(): Promise<PriceSyncResult>;
  /** Publishes `usage.json` now, as of `event.time` if given (it also runs every `usageReportIntervalMs`). */
  usageReport(event?: UsageReportEvent): Promise<UsageReportSummary>;
  /**
   * Runs the uptime probe now, against this stack's gateway or `baseUrl`, dated now or `at` (it also runs every
   * `uptimeProbeIntervalMs`, against the gateway).
   */
  uptimeProbe(run?: { readonly baseUrl?: string; readonly at?: number }): Promise<UptimeProbeSummary>;
  /** Requests each instance has been handed so far, the main thread's first. */
  servedByInstance(): Promise<number[]>;
  /**
   * Stops everything. With `graceMs`, an orderly drain first, as `npm start` does on a signal: the instances
   * stop taking connections and finish the requests under way (up to `graceMs`, then cut them), every
   * settlement record reaches the queue, and the consumer settles the queue (up to `graceMs` more) — the
   * local queue lives in memory, and a record left on it would be a call served and never charged.
   */
  stop(options?: StopOptions): Promise<void>;
}

export interface StopOptions {
  readonly graceMs?: number;
}

/** See SqsSettlementSink: long enough for a busy local host to fill batches; it delays no client. */
const LOCAL_SETTLEMENT_LINGER_MS = 20;

/**
 * The whole service on one machine: emulators, provisioning and seeding, the upstream simulator, and the
 * Lambda handlers served over HTTP as Function URL invocations with real response streaming.
 */
export const startLocalStack = async (options: LocalStackOptions = {}): Promise<LocalStack> => {
  const log = options.log ?? (() => {});
  const instances = options.instances ?? 1;
  if (instances > 1 && (options.clock || options.dynamodbOverrides))
    throw new Error('clock and dynamodbOverrides act on one instance only: run them with instances: 1');
  const stops: (() => Promise<void>)[] = [];
  const losses: Promise<Error>[] = [];
  const stopAll = async () => {
    for (const stop of stops.reverse()) await stop().catch(() => {});
  };
  try {
    // A port already taken fails here, before the emulators start and the seed rewrites the registry and the demo
    // key in a kept DATA_DIR (it was found only at the listen, seconds and changes later).
    const wantedPort = options.port ?? 8787;
    if (wantedPort !== 0) await portIsFree(wantedPort, options.host ?? '127.0.0.1');
    // The functions' `env:` key references resolve here: the caller's environment and the simulator's keys.
    const keyEnv = { ...options.secretEnv, ...SIMULATOR_SECRETS };
    // A bad registry file fails here, naming the field at fault, before any emulator starts.
    const registryFile = options.registryFile ? readRegistryFile(options.registryFile, keyEnv) : null;
    for (const warning of registryFile?.warnings ?? []) log(`registry file: ${warning}`);
    let emulators: EmulatorEndpoints;
    if (options.emulators) emulators = options.emulators;
    else {
      const started = await startEmulators({ dataDir: options.dataDir, log });
      stops.push(() => started.stop());
      losses.push(started.lost);
      emulators = { dynamodb: started.dynamodb, sqs: started.sqs, s3: started.s3 };
    }

    const resources = await provision(emulators, options.prefix ?? 'svc-local', {
      ...(options.settlementVisibilityTimeoutSeconds
        ? { settlementVisibilityTimeoutSeconds: options.settlementVisibilityTimeoutSeconds }
        : {}),
    });
    const models = registryFile?.models ?? readCatalog();

    let simulatorUrl: string | null = null;
    if (registryFile ? registryFile.usesSimulator : !options.upstreamBaseUrl) {
      if (options.simulatorUrl) simulatorUrl = options.simulatorUrl;
      else {
        const simulator = await startServiceWorker<{ url: string }>(
          new URL('./simulator-worker.ts', import.meta.url),
          {
            latencyMs: options.simulatorLatencyMs ?? 0,
            promptCachingModels: models.filter((m) => m.flags.promptCaching).map((m) => m.id),
            prices: simulatorPrices(models),
          },
        );
        stops.push(() => simulator.stop());
        losses.push(simulator.lost);
        simulatorUrl = simulator.ready.url;
        log(`upstream simulator listening on ${simulatorUrl}`);
      }
    }
    const deployments = registryFile
      ? registryFile.deployments(simulatorUrl)
      : options.upstreamBaseUrl
        ? externalDeployments(models, options.upstreamBaseUrl, {
            withKey: Boolean(options.upstreamApiKey),
            ...(options.upstreamModel ? { upstreamModel: options.upstreamModel } : {}),
          })
        : simulatorDeployments(models, simulatorUrl as string);
    if (registryFile)
      await registryFile.retireUnlisted(emulators.dynamodb, resources.tables.registry, deployments);
    if (options.dataDir) {
      // Started another way than last time on this DATA_DIR: that way's seeded entries go.
      const retired = await replaceFormerSeed(
        options.dataDir,
        emulators.dynamodb,
        resources.tables.registry,
        {
          models,
          deployments,
        },
      );
      const ids = [...retired.models, ...retired.deployments];
      if (ids.length > 0)
        log(
          `registry: retired what the last start on this DATA_DIR seeded and this one does not (${ids.slice(0, 3).join(', ')}${ids.length > 3 ? `, and ${ids.length - 3} more` : ''})`,
        );
    }

    const { demoApiKey, revokedDemoKeys } = await seed({
      dynamodbEndpoint: emulators.dynamodb,
      accountsTable: resources.tables.accounts,
      registryTable: resources.tables.registry,
      models,
      deployments,
      ...(options.demoApiKey ? { demoApiKey: options.demoApiKey } : {}),
    });

    // The functions' configuration, exactly as their Lambda environment would carry it.
    const functionEnv: Record<string, string> = {
      ...Object.fromEntries(
        Object.entries(tables).map(([id, t]) => [t.envVar, resources.tables[id as keyof typeof tables]]),
      ),
      [queues.settlement.envVar]: resources.settlementQueueUrl,
      // DynamoDB Local runs transactions one at a time: parallel settlements would only queue in front of the
      // gateway's admissions. On AWS the default (4) applies.
      SETTLEMENT_PARALLELISM: '1',
      ...options.functionEnv,
    };
    const config = loadConfig(functionEnv);
    // One thread serves every invocation here, so the SQS work after each response runs on its own thread,
    // as it would on the invocation's own Lambda instance (see settlement-thread.ts). That thread serves many
    // invocations at once, so records may share an SQS batch for a few milliseconds.
    const settlements = await ThreadedSettlementSink.start({
      client: localClientConfig(emulators.sqs),
      queueUrl: resources.settlementQueueUrl,
      lingerMs: LOCAL_SETTLEMENT_LINGER_MS,
    });
    stops.push(() => settlements.stop());
    losses.push(settlements.lost);
    const containerEnv = {
      ...keyEnv,
      ...(options.upstreamApiKey ? { UPSTREAM_API_KEY: options.upstreamApiKey } : {}),
    };
    const containerAws = {
      dynamodb: localClientConfig(emulators.dynamodb),
      sqs: localClientConfig(emulators.sqs),
    };
    const container = createContainer(config, {
      env: containerEnv,
      aws: {
        ...containerAws,
        dynamodb: { ...containerAws.dynamodb, ...options.dynamodbOverrides },
      },
      settlements,
      metering: options.metering ?? true,
      ...(options.clock ? { clock: options.clock } : {}),
      onDynamoClient: enforceTableGrants(config.tables),
    });
    stops.push(() => container.close());

    // The demo wallet's *first* top-up: a restart on the same DATA_DIR (whatever DEMO_BALANCE_USD says then)
    // credits nothing more — an account that was ever funded is trusted, permanently. (The reference once named
    // the amount, so a changed DEMO_BALANCE_USD credited the wallet again.)
    const demo = await container.accounts.getAccount(DEMO_ACCOUNT_ID);
    const demoFundedBefore = demo?.tier === 'trusted';
    if (options.demoBalanceNano && !demoFundedBefore) {
      await container.accounting.topUp({
        accountId: DEMO_ACCOUNT_ID,
        amount: options.demoBalanceNano,
        reference: `demo-seed-${nanoToUsd(options.demoBalanceNano)}`,
        at: Date.now(),
      });
    }
    const demoBalanceNano = (await container.accounting.wallet(DEMO_ACCOUNT_ID)).balance;
    if (options.consumers ?? true) {
      const consumer = await startServiceWorker<'ready'>(new URL('./consumer-worker.ts', import.meta.url), {
        functionEnv,
        aws: { dynamodb: localClientConfig(emulators.dynamodb), sqs: localClientConfig(emulators.sqs) },
        queueUrl: resources.settlementQueueUrl,
        queueArn: resources.settlementQueueArn,
        sweepIntervalMs: options.sweepIntervalMs ?? 60_000,
      } satisfies ConsumerWorkerInput);
      stops.push(() => consumer.stop());
      losses.push(consumer.lost);
    }

    const priceSyncHandler = (await import('#functions/price-sync.ts')).createHandler(() => container);
    const priceSync = () =>
      invoking.run('price-sync', () => priceSyncHandler({}, invocationContext('price-sync', 60_000)));
    const priceSyncEvery = options.priceSyncIntervalMs ?? 10 * 60_000;
    if (priceSyncEvery > 0) {
      const timer = setInterval(() => {
        priceSync().catch((error: unknown) => container.log.warn('price sync failed', { error }));
      }, priceSyncEvery);
      timer.unref();
      stops.push(async () => clearInterval(timer));
    }

    const routes = await loadRoutes(container, options.functionTimeoutsMs);
    // The site bucket behind the site root (`/`, `/usage.json`), and the usage report's schedule.
    const site = await startLocalSite({
      endpoints: emulators,
      bucket: resources.siteBucket,
      config,
      reportIntervalMs: options.usageReportIntervalMs ?? ((options.consumers ?? true) ? 5 * 60_000 : 0),
      log: container.log,
    });
    stops.push(() => site.stop());

    const host = options.host ?? '127.0.0.1';
    const main = createInstanceServer(routes, site, (error) =>
      container.log.error('local host failed a request', { error }),
    );
    const { server } = main;
    // Several instances share the port (SO_REUSEPORT), and so would another stack's listening the same way: the
    // kernel would split connections between them. Checked free first, without the option.
    const wanted = options.port ?? 8787;
    if (instances > 1 && wanted !== 0) await portIsFree(wanted, host);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port: wanted, host, reusePort: instances > 1 }, resolve);
    });
    stops.push(async () => {
      server.closeAllConnections();
      if (server.listening) await new Promise((resolve) => server.close(resolve));
    });
    const { port } = server.address() as AddressInfo;
    // The other instances listen on the same port once it is known (port 0 picks one above).
    const workers: ServiceWorker<'ready'>[] = [];
    for (let i = 1; i < instances; i++) {
      const settlementPort = settlements.attach();
      const worker = await startServiceWorker<'ready'>(
        new URL('./instance-worker.ts', import.meta.url),
        {
          port,
          host,
          functionEnv,
          secretEnv: containerEnv,
          aws: containerAws,
          metering: options.metering ?? true,
          settlementPort,
          site: { s3: emulators.s3, bucket: resources.siteBucket },
          ...(options.functionTimeoutsMs ? { functionTimeoutsMs: options.functionTimeoutsMs } : {}),
        } satisfies InstanceWorkerInput,
        [settlementPort],
      );
      workers.push(worker);
      stops.push(() => worker.stop());
      losses.push(worker.lost);
    }
    // An unspecified address (every interface) is not one to call: the URL names loopback.
    const url = `http://${urlHost(host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host)}:${port}`;
    const probe = await startLocalProbe({
      config,
      dynamodb: emulators.dynamodb,
      baseUrl: `${url}/v1`,
      intervalMs: options.uptimeProbeIntervalMs ?? ((options.consumers ?? true) ? 60_000 : 0),
      log: container.log,
    });
    stops.push(async () => probe.stop());
    return {
      url,
      lost: losses.length > 0 ? Promise.race(losses) : new Promise<Error>(() => {}),
      demoApiKey,
      revokedDemoKeys,
      simulatorUrl,
      demoBalanceNano,
      demoFundedBefore,
      emulators,
      resources,
      config,
      container,
      priceSync,
      usageReport: (event) => site.runReport(event),
      uptimeProbe: (run) => probe.run(run),
      servedByInstance: async () => [
        main.served(),
        ...(await Promise.all(
          workers.map((w) =>
            askWorker<{ served: number }>(w, 'served' satisfies InstanceRequest, 'served').then(
              (r) => r.served,
            ),
          ),
        )),
      ],
      stop: async ({ graceMs } = {}) => {
        await probe.stop();
        // A grace of 0 (SHUTDOWN_GRACE_MS=0) still drains: the calls under way are cut at once and charged as
        // client_aborted, not dropped unrecorded. Only a stop given no grace at all (tests) skips it.
        if (graceMs !== undefined) {
          await drain({
            graceMs,
            instances: [
              main.drain,
              ...workers.map(
                (w) => (ms: number) =>
                  askWorker<{ drained: DrainResult }>(
                    w,
                    { drain: ms } satisfies InstanceRequest,
                    'drained',
                  ).then(
                    (r) => r.drained,
                    // A dead instance (the loss that may have started this stop) drains nothing: the calls it was
                    // serving ended with it, and sent no settlement.
                    (): DrainResult => {
                      log(
                        'a gateway instance had ended: the calls it was serving ended with it, unsettled (their holds expire uncharged)',
                      );
                      return { cut: 0, unfinished: 0 };
                    },
                  ),
              ),
            ],
            sqs: localClientConfig(emulators.sqs),
            queueUrl: (options.consumers ?? true) ? resources.settlementQueueUrl : null,
            dlqUrl: resources.settlementDlqUrl,
            log,
          });
        }
        await stopAll();
      },
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
};

/** A host as a URL names it: an IPv6 literal in brackets. */
const urlHost = (host: string): string => (host.includes(':') ? `[${host}]` : host);

/** Resolves when nothing listens on `port`; rejects otherwise, saying how to pick another (PORT). */
const portIsFree = (port: number, host: string): Promise<void> =>
  new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (error: NodeJS.ErrnoException) =>
      reject(
        error.code === 'EADDRINUSE'
          ? new Error(
              `port ${port} on ${host} is in use: stop what listens there, or set PORT (0: any free port)`,
              {
                cause: error,
              },
            )
          : error,
      ),
    );
    probe.listen({ port, host }, () => probe.close(() => resolve()));
  });

/** The least time the consumer is given to settle the calls a stop cut, whatever the grace. */
const CUT_SETTLE_MS = 5_000;

/**
 * The orderly part of a stop: requests finished, their records on the queue (an invocation ends only once SQS
 * has its record), the queue settled by the consumer. What could not be done in time is logged, not hidden.
 */
const drain = async (options: {
  graceMs: number;
  instances: readonly ((graceMs: number) => Promise<DrainResult>)[];
  sqs: SQSClientConfig;
  /** The settlement queue, when this stack's consumer settles it (null: nothing will empty it). */
  queueUrl: string | null;
  dlqUrl: string;
  log: (line: string) => void;
}): Promise<void> => {
  const drained = await Promise.all(options.instances.map((drainInstance) => drainInstance(options.graceMs)));
  const cut = drained.reduce((sum, d) => sum + d.cut, 0);
  const unfinished = drained.reduce((sum, d) => sum + d.unfinished, 0);
  const requests = (n: number) => `${n} request${n === 1 ? '' : 's'}`;
  if (cut > 0)
    options.log(
      `${requests(cut)} still running after ${options.graceMs} ms ${cut === 1 ? 'was' : 'were'} cut` +
        (unfinished > 0
          ? `; ${unfinished} of them did not end and sent no settlement (their holds expire uncharged)`
          : ' and settled as client_aborted'),
    );
  const sqs = new SQSClient(options.sqs);
  // Cut calls' settlements are money: the queue gets a few seconds for them even when the grace was 0.
  const settleMs = cut > 0 ? Math.max(options.graceMs, CUT_SETTLE_MS) : options.graceMs;
  try {
    if (options.queueUrl) {
      const left = await waitForEmptyQueue(sqs, options.queueUrl, settleMs);
      if (left > 0)
        options.log(
          `${left} settlement message${left === 1 ? ' was' : 's were'} still on the queue after ${settleMs} ms and are lost with it (their holds expire)`,
        );
    }
    const dead = await messagesLeft(sqs, options.dlqUrl);
    if (dead > 0)
      options.log(
        `${dead} settlement message${dead === 1 ? '' : 's'} on the dead-letter queue ${dead === 1 ? 'is' : 'are'} lost with it (the local queues live in memory)`,
      );
  } catch (error) {
    options.log(
      `could not check the settlement queue: ${error instanceof Error ? error.message : String(error)}`,
    );
  } finally {
    sqs.destroy();
  }
};
