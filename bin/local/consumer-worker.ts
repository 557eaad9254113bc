/**
 * Worker thread standing in for two Lambda functions and their triggers: the settlement consumer behind an
 * SQS event source mapping (settlement-poller.ts), and the hold sweeper behind its schedule. It runs on its
 * own thread because on AWS it is a separate function: its store transactions should not share the gateway's
 * event loop.
 */

import { parentPort, workerData } from 'node:worker_threads';
import type { DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { SQSClient, type SQSClientConfig } from '@aws-sdk/client-sqs';
import type { Context } from 'aws-lambda';
import { hotPathClientConfig } from '#adapters/aws-clients.ts';
import { loadConfig } from '#functions/config.ts';
import { createContainer } from '#functions/container.ts';
import { createHandler as createSweeper } from '#functions/hold-sweeper.ts';
import { createHandler as createSettlement } from '#functions/settlement.ts';
import { invocationContext } from './function-url.ts';
import { startPoller } from './settlement-poller.ts';
import { enforceTableGrants, invoking } from './table-grants.ts';
import { lowerThreadPriority } from './workers.ts';

// Separate functions on AWS, with CPU of their own.
lowerThreadPriority();

export interface ConsumerWorkerInput {
  readonly functionEnv: Record<string, string>;
  readonly aws: { readonly dynamodb: DynamoDBClientConfig; readonly sqs: SQSClientConfig };
  readonly queueUrl: string;
  readonly queueArn: string;
  /** How often the sweeper's schedule fires. */
  readonly sweepIntervalMs: number;
}

const input = workerData as ConsumerWorkerInput;
const config = loadConfig(input.functionEnv);
const container = createContainer(config, {
  aws: input.aws,
  onDynamoClient: enforceTableGrants(config.tables),
});
const sweep = createSweeper(() => container);
// The event source mapping's own polling: an SQS client as hot as the consumer's.
const sqs = new SQSClient({ ...hotPathClientConfig(container.log), ...input.aws.sqs });

const stopPolling = startPoller({
  sqs,
  queueUrl: input.queueUrl,
  queueArn: input.queueArn,
  handler: createSettlement(() => container),
  onError: (message, error) => container.log.error(message, { error }),
});

const sweeping = setInterval(() => {
  invoking
    .run('hold-sweeper', () => sweep({} as never, invocationContext('hold-sweeper', 60_000) as Context))
    .catch((error: unknown) => container.log.error('hold sweep failed', { error }));
}, input.sweepIntervalMs);

parentPort?.on('message', async (message: unknown) => {
  if (message !== 'stop') return;
  clearInterval(sweeping);
  await stopPolling();
  sqs.destroy();
  await container.close();
  parentPort?.postMessage('stopped');
});
parentPort?.postMessage('ready');
