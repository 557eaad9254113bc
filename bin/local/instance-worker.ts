/**
 * Worker thread running one more gateway instance for the local host (`instances` > 1): its own container —
 * registry cache, deployment health, admission memory, connection pools — as a concurrent Lambda instance has
 * its own, listening on the host's port beside the others (SO_REUSEPORT: the kernel spreads connections over
 * the instances). Its settlement records go to the host's sender thread over an attached port.
 */

import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import type { DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import type { SQSClientConfig } from '@aws-sdk/client-sqs';
import { loadConfig } from '#functions/config.ts';
import { createContainer } from '#functions/container.ts';
import { createInstanceServer, loadRoutes } from './function-host.ts';
import { ThreadedSettlementSink } from './settlement-thread.ts';
import { siteReader } from './site.ts';
import { enforceTableGrants } from './table-grants.ts';

export interface InstanceWorkerInput {
  readonly port: number;
  readonly host: string;
  readonly functionEnv: Readonly<Record<string, string>>;
  /** Where `env:` secret references resolve. */
  readonly secretEnv: Readonly<Record<string, string | undefined>>;
  readonly aws: { readonly dynamodb: DynamoDBClientConfig; readonly sqs: SQSClientConfig };
  readonly metering: boolean;
  /** From ThreadedSettlementSink.attach, transferred to this thread. */
  readonly settlementPort: MessagePort;
  readonly site: { readonly s3: string; readonly bucket: string };
  readonly functionTimeoutsMs?: Readonly<Record<string, number>>;
}

const input = workerData as InstanceWorkerInput;
const settlements = ThreadedSettlementSink.over(input.settlementPort);
const config = loadConfig(input.functionEnv);
const container = createContainer(config, {
  onDynamoClient: enforceTableGrants(config.tables),
  env: input.secretEnv,
  aws: input.aws,
  settlements,
  metering: input.metering,
});
const site = siteReader(input.site.s3, input.site.bucket);
const instance = createInstanceServer(await loadRoutes(container, input.functionTimeoutsMs), site, (error) =>
  container.log.error('local host failed a request', { error }),
);
await new Promise<void>((resolve, reject) => {
  instance.server.once('error', reject);
  instance.server.listen({ port: input.port, host: input.host, reusePort: true }, resolve);
});
parentPort?.postMessage('ready');

/** What the host asks of this instance: how many it served, to drain (see InstanceServer.drain), or to stop. */
export type InstanceRequest = 'served' | { readonly drain: number } | 'stop';

parentPort?.on('message', async (message: InstanceRequest) => {
  if (message === 'served') {
    parentPort?.postMessage({ served: instance.served() });
    return;
  }
  if (typeof message === 'object') {
    parentPort?.postMessage({ drained: await instance.drain(message.drain) });
    return;
  }
  instance.server.closeAllConnections();
  if (instance.server.listening) await new Promise((resolve) => instance.server.close(resolve));
  site.close();
  await settlements.stop();
  await container.close();
  parentPort?.postMessage('stopped');
});
