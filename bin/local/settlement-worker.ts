/**
 * Worker thread that sends the local host's settlement records to the SQS emulator — with the same
 * SqsSettlementSink (and the real AWS SDK) the Lambda functions use inline. Receives lists of `{ id, record }`,
 * replies with lists of `{ id }` once SQS accepted the record or `{ id, error }` if it was refused.
 */
import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import { SQSClient, type SQSClientConfig } from '@aws-sdk/client-sqs';
import { boundedRequests, hotPathClientConfig } from '#adapters/aws-clients.ts';
import { SqsSettlementSink } from '#adapters/sqs-settlement-sink.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import { lowerThreadPriority, perTurn } from './workers.ts';

// After-response work of other invocations: on AWS it never delays a request served elsewhere.
lowerThreadPriority();

interface WorkerInput {
  readonly client: SQSClientConfig;
  readonly queueUrl: string;
  readonly lingerMs: number;
}

const input = workerData as WorkerInput;
// Bounded as the functions' inline sink is: an SQS that stops answering fails the send (its record is then
// what the invocation reports) instead of holding it.
const client = new SQSClient({
  maxAttempts: 5,
  md5: false,
  ...hotPathClientConfig(),
  ...boundedRequests(),
  ...input.client,
});
const sink = new SqsSettlementSink(client, input.queueUrl, { lingerMs: input.lingerMs });

/** A record handed to this thread, and what it answers once SQS has (or has not) taken it. */
export interface SettlementHandoff {
  readonly id: number;
  readonly record: SettlementRecord;
}
export interface SettlementAck {
  readonly id: number;
  readonly error?: string;
}

/** Whatever the records come over: this thread's parent port, or a port a gateway instance was given. */
interface Channel {
  postMessage(value: unknown): void;
}

/** Records handed over and not yet accepted by SQS (or refused): a stop waits for them. */
const sending = new Set<Promise<void>>();

/** Sends the records of a handoff; acknowledgements that settle in one turn go back in one message. */
const acceptor = (channel: Channel) => {
  const ack = perTurn<SettlementAck>((acks) => channel.postMessage(acks));
  return (handoff: readonly SettlementHandoff[]) => {
    for (const { id, record } of handoff) {
      const sent = sink.send(record).then(
        () => ack({ id }),
        (error: unknown) => ack({ id, error: error instanceof Error ? error.message : String(error) }),
      );
      sending.add(sent);
      void sent.finally(() => sending.delete(sent));
    }
  };
};

/** Sent by the local host to let another gateway instance hand its records to this thread. */
export interface AttachPort {
  readonly attach: MessagePort;
}

const fromParent = parentPort ? acceptor(parentPort) : () => {};
parentPort?.on('message', async (message: readonly SettlementHandoff[] | AttachPort | 'stop') => {
  if (message === 'stop') {
    // Records still lingering for a batch, or on their way, reach SQS before the client goes.
    await Promise.allSettled([...sending]);
    client.destroy();
    parentPort?.postMessage('stopped');
    return;
  }
  if ('attach' in message) {
    const port = message.attach;
    port.on('message', acceptor(port));
    return;
  }
  fromParent(message);
});
parentPort?.postMessage('ready');
