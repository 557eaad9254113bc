import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SQSClient } from '@aws-sdk/client-sqs';
import OpenAI from 'openai';
import { inject } from 'vitest';
import { NANO_PER_USD } from '#core/pricing.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import { LOCAL_AWS_ENV, localClientConfig } from '#local/emulators.ts';
import { discardMessages, takeMessages } from '#local/queue-drain.ts';
import { readCatalog, simulatorPrices } from '#local/seed.ts';
import { type LocalStack, type LocalStackOptions, startLocalStack } from '#local/stack.ts';
import { grantViolations } from '#local/table-grants.ts';
import { type Simulator, type SimulatorOptions, startSimulator } from '#sim/server.ts';
import { childEnv } from './child-env.ts';

export interface TestStack {
  readonly stack: LocalStack;
  readonly simulator: Simulator;
  /** Base URL of the API, ending in /v1. */
  readonly baseURL: string;
  readonly apiKey: string;
  /** The official SDK pointed at the gateway, with retries off so each call is one request. */
  openai(options?: { apiKey?: string }): OpenAI;
  /** POSTs JSON to an API path with the demo key (or the given headers). */
  post(path: string, body: unknown, headers?: Record<string, string>): Promise<Response>;
  stop(): Promise<void>;
}

/** Fast timeouts so fault tests finish quickly; quiet logs. */
const TEST_FUNCTION_ENV = {
  LOG_LEVEL: 'silent',
  UPSTREAM_STREAM_FIRST_BYTE_TIMEOUT_MS: '1500',
  UPSTREAM_COMPLETION_TIMEOUT_MS: '3000',
  UPSTREAM_IDLE_TIMEOUT_MS: '3000',
};

/**
 * For test files that inject upstream faults on purpose to check each request's own attempts: the circuit
 * breaker must not learn across their tests. Circuits have their own tests (health-routing.test.ts).
 */
export const NO_CIRCUIT_BREAKING = {
  HEALTH_MIN_CALLS: '1000000',
  HEALTH_OVERLOAD_RUN: '1000000',
  HEALTH_FAILURE_RUN: '1000000',
} as const;

/**
 * A whole local stack on the shared emulators, with its own simulator (so a test file can inject faults
 * without disturbing others) and its own table/queue prefix.
 */
export const startTestStack = async (
  options: Partial<LocalStackOptions> & { simulatorOptions?: SimulatorOptions } = {},
): Promise<TestStack> => {
  const { simulatorOptions, functionEnv, ...stackOptions } = options;
  const catalog = readCatalog();
  const simulator = await startSimulator({
    promptCachingModels: catalog.filter((m) => m.flags.promptCaching).map((m) => m.id),
    prices: simulatorPrices(catalog),
    ...simulatorOptions,
  });
  const stack = await startLocalStack({
    port: 0,
    emulators: inject('emulators'),
    prefix: `t${randomBytes(4).toString('hex')}`,
    simulatorUrl: simulator.url,
    functionEnv: { ...TEST_FUNCTION_ENV, ...functionEnv },
    // A funded (hence trusted) demo account; the settlement consumer only where a test asks for it, so tests
    // that read the queue see every record.
    demoBalanceNano: 100 * NANO_PER_USD,
    consumers: false,
    // The price sync runs when a test asks (stack.priceSync()), not on a timer.
    priceSyncIntervalMs: 0,
    ...stackOptions,
  });
  const baseURL = `${stack.url}/v1`;
  return {
    stack,
    simulator,
    baseURL,
    apiKey: stack.demoApiKey,
    openai: (o = {}) =>
      new OpenAI({ baseURL, apiKey: o.apiKey ?? stack.demoApiKey, maxRetries: 0, timeout: 20_000 }),
    post: (path, body, headers) =>
      fetch(`${baseURL}${path}`, {
        method: 'POST',
        headers: headers ?? {
          authorization: `Bearer ${stack.demoApiKey}`,
          'content-type': 'application/json',
        },
        body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
      }),
    stop: async () => {
      await stack.stop();
      await simulator.close();
      // A call a function's IAM grants would refuse on AWS fails the file that made it (bin/local/table-grants.ts).
      const denied = grantViolations.splice(0);
      if (denied.length > 0) throw new Error(`calls outside the functions' grants:\n${denied.join('\n')}`);
    },
  };
};

/**
 * The admin CLI as an operator runs it against AWS — the accounting tables by name and the standard AWS_*
 * variables — here pointed at a test stack's tables. Resolves to its standard output.
 */
export const adminCli =
  (t: TestStack) =>
  async (...args: string[]): Promise<string> => {
    const { stdout } = await promisify(execFile)(process.execPath, ['bin/admin.ts', ...args], {
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      env: childEnv({
        ...LOCAL_AWS_ENV,
        ACCOUNTS_TABLE: t.stack.resources.tables.accounts,
        WALLET_TABLE: t.stack.resources.tables.wallet,
        BUCKETS_TABLE: t.stack.resources.tables.buckets,
        USAGE_TABLE: t.stack.resources.tables.usage,
        AWS_ENDPOINT_URL_DYNAMODB: t.stack.emulators.dynamodb,
      }),
    });
    return stdout.trim();
  };

/** Receives (and deletes) what is on a stack's settlement queue now; empty when there is nothing. */
const receiveSettlements = async (sqs: SQSClient, stack: LocalStack): Promise<SettlementRecord[]> =>
  // A message carries one record or, when several were ready together, an array of them.
  (await takeMessages(sqs, stack.resources.settlementQueueUrl)).flatMap((m) =>
    [JSON.parse(m.Body ?? '{}') as SettlementRecord | SettlementRecord[]].flat(),
  );

/** Empties a stack's settlement queue (what previous tests left behind). */
export const drainSettlements = async (stack: LocalStack): Promise<void> => {
  const sqs = new SQSClient(localClientConfig(stack.emulators.sqs));
  try {
    await discardMessages(sqs, stack.resources.settlementQueueUrl);
  } finally {
    sqs.destroy();
  }
};

/**
 * Reads a stack's settlement queue until the records of the given calls have arrived (or the timeout passes) and
 * returns them in the order asked, undefined for one that never came. Records of other calls read meanwhile are
 * deleted too: a call an earlier test made may send its record after that test's drain (records leave once the
 * response has ended), and a count-based read would take it for this test's.
 */
export const takeSettlementsOf = async (
  stack: LocalStack,
  requestIds: readonly (string | null)[],
  timeoutMs = 5_000,
): Promise<(SettlementRecord | undefined)[]> => {
  const sqs = new SQSClient(localClientConfig(stack.emulators.sqs));
  const found = new Map<string, SettlementRecord>();
  const deadline = Date.now() + timeoutMs;
  try {
    // A null id (a response without x-request-id) is not waited for: undefined fails the caller's assertion at once.
    while (requestIds.some((id) => id !== null && !found.has(id)) && Date.now() < deadline) {
      const received = await receiveSettlements(sqs, stack);
      if (received.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
      for (const record of received) found.set(record.requestId, record);
    }
  } finally {
    sqs.destroy();
  }
  return requestIds.map((id) => (id === null ? undefined : found.get(id)));
};

/**
 * Reads settlement records from a stack's queue until `count` have arrived (or the timeout passes), deleting
 * them so the next read starts fresh.
 */
export const takeSettlements = async (
  stack: LocalStack,
  count: number,
  timeoutMs = 5_000,
): Promise<SettlementRecord[]> => {
  const sqs = new SQSClient(localClientConfig(stack.emulators.sqs));
  const records: SettlementRecord[] = [];
  const deadline = Date.now() + timeoutMs;
  try {
    while (records.length < count && Date.now() < deadline) {
      const received = await receiveSettlements(sqs, stack);
      if (received.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
      records.push(...received);
    }
  } finally {
    sqs.destroy();
  }
  return records;
};
