/**
 * Worker thread that sends the local host's settlement records to the SQS emulator — with the same
 * SqsSettlementSink (and the real AWS SDK) the Lambda functions use inline. Receives `{ id, record }`
 * messages, replies `{ id }` once SQS accepted the record or `{ id, error }` if it was refused.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { SQSClient, type SQSClientConfig } from '@aws-sdk/client-sqs';
import { SqsSettlementSink } from '#adapters/sqs-settlement-sink.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import { lowerThreadPriority } from './workers.ts';

// After-response work of other invocations: on AWS it never delays a request served elsewhere.
lowerThreadPriority();

interface WorkerInput {
  readonly client: SQSClientConfig;
  readonly queueUrl: string;
  readonly lingerMs: number;
}

const input = workerData as WorkerInput;
const client = new SQSClient({ maxAttempts: 5, md5: false, ...input.client });
const sink = new SqsSettlementSink(client, input.queueUrl, { lingerMs: input.lingerMs });

parentPort?.on('message', (message: { id: number; record: SettlementRecord } | 'stop') => {
  if (message === 'stop') {
    client.destroy();
    parentPort?.postMessage('stopped');
    return;
  }
  sink.send(message.record).then(
    () => parentPort?.postMessage({ id: message.id }),
    (error: unknown) =>
      parentPort?.postMessage({
        id: message.id,
        error: error instanceof Error ? error.message : String(error),
      }),
  );
});
parentPort?.postMessage('ready');
