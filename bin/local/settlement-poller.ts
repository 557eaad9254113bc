import {
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { invocationContext } from './function-url.ts';
import { invoking } from './table-grants.ts';

export interface PollerOptions {
  readonly sqs: SQSClient;
  readonly queueUrl: string;
  readonly queueArn: string;
  readonly handler: (event: SQSEvent, context: Context) => Promise<SQSBatchResponse | undefined>;
  readonly onError?: (message: string, error: unknown) => void;
}

/**
 * Short polls, because the emulator's long poll waits out its whole period even when messages arrive. An idle
 * queue is polled less and less often (up to every 250 ms), a busy one back to back.
 */
const MIN_IDLE_MS = 10;
const MAX_IDLE_MS = 250;

/**
 * What a Lambda SQS event source mapping does, for the local host: receive up to 10 messages, invoke the
 * consumer with them as one event, delete the ones it did not report in `batchItemFailures`, and leave the
 * rest to reappear after the visibility timeout (the queue's redrive policy then moves a message to the DLQ
 * after its fifth receive). A handler error leaves the whole batch. Returns a stop function.
 */
export const startPoller = (options: PollerOptions): (() => Promise<void>) => {
  let running = true;
  const onError = options.onError ?? (() => {});
  const loop = (async () => {
    let idleMs = MIN_IDLE_MS;
    while (running) {
      let messages: Message[];
      try {
        const received = await options.sqs.send(
          new ReceiveMessageCommand({
            QueueUrl: options.queueUrl,
            MaxNumberOfMessages: 10,
            WaitTimeSeconds: 0,
            MessageSystemAttributeNames: ['All'],
            MessageAttributeNames: ['All'],
          }),
        );
        messages = received.Messages ?? [];
      } catch (error) {
        if (running) onError('settlement poll failed', error);
        await new Promise((resolve) => setTimeout(resolve, 500));
        continue;
      }
      if (messages.length === 0) {
        await new Promise((resolve) => setTimeout(resolve, idleMs));
        idleMs = Math.min(idleMs * 2, MAX_IDLE_MS);
        continue;
      }
      idleMs = MIN_IDLE_MS;
      let failed: Set<string>;
      try {
        const result = await invoking.run('settlement', () =>
          options.handler(toEvent(messages, options.queueArn), invocationContext('settlement', 30_000)),
        );
        failed = new Set((result?.batchItemFailures ?? []).map((f) => f.itemIdentifier));
      } catch (error) {
        onError('settlement batch failed; every message will be redelivered', error);
        continue;
      }
      const done = messages.filter((m) => !failed.has(m.MessageId ?? ''));
      if (done.length > 0) {
        await options.sqs
          .send(
            new DeleteMessageBatchCommand({
              QueueUrl: options.queueUrl,
              Entries: done.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
            }),
          )
          .catch((error: unknown) =>
            onError('settlement delete failed; the batch will be redelivered', error),
          );
      }
    }
  })();
  return async () => {
    running = false;
    await loop;
  };
};

const toEvent = (messages: readonly Message[], queueArn: string): SQSEvent => ({
  Records: messages.map((m) => ({
    messageId: m.MessageId ?? '',
    receiptHandle: m.ReceiptHandle ?? '',
    body: m.Body ?? '',
    attributes: {
      ApproximateReceiveCount: m.Attributes?.ApproximateReceiveCount ?? '1',
      SentTimestamp: m.Attributes?.SentTimestamp ?? String(Date.now()),
      SenderId: m.Attributes?.SenderId ?? 'local',
      ApproximateFirstReceiveTimestamp: m.Attributes?.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
    },
    messageAttributes: Object.fromEntries(
      Object.entries(m.MessageAttributes ?? {}).map(([name, a]) => [
        name,
        { dataType: a.DataType ?? 'String', stringValue: a.StringValue },
      ]),
    ),
    md5OfBody: m.MD5OfBody ?? '',
    eventSource: 'aws:sqs',
    eventSourceARN: queueArn,
    awsRegion: 'us-east-1',
  })),
});
