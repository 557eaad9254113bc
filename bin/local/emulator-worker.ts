/**
 * Worker thread hosting the SQS-compatible (local-aws-sqs) and S3-compatible (s3rver) emulators, so their
 * request handling never shares an event loop with the handlers they serve — the same separation the
 * managed services have on AWS. Receives `{ s3Directory }`, replies `{ sqsPort, s3Port }`, and closes
 * both servers on a `stop` message.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { createSqsServer } from 'local-aws-sqs';
import S3rver from 's3rver';
import { lowerThreadPriority } from './workers.ts';

// Managed services on AWS: they must not take CPU from the handlers they stand in for.
lowerThreadPriority();

interface WorkerInput {
  readonly s3Directory: string;
}

const { s3Directory } = workerData as WorkerInput;

const sqs: Server = await createSqsServer({
  port: 0,
  hostname: '127.0.0.1',
  // Tests and restarts recreate queues by name at once; the 60 s AWS rule would only get in the way.
  emulateQueueCreationLifecycle: false,
});
const s3 = new S3rver({ port: 0, address: '127.0.0.1', directory: s3Directory, silent: true });
const s3Address = (await s3.run()) as AddressInfo;

parentPort?.postMessage({ sqsPort: (sqs.address() as AddressInfo).port, s3Port: s3Address.port });

parentPort?.on('message', async (message: unknown) => {
  if (message !== 'stop') return;
  sqs.closeAllConnections();
  await new Promise((resolve) => sqs.close(resolve));
  s3.httpServer?.closeAllConnections();
  await s3.close().catch(() => {});
  parentPort?.postMessage('stopped');
});
