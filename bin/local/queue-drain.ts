import {
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';

/**
 * Messages on a queue that a consumer has yet to finish: waiting, received but not deleted (in flight), and
 * delayed. SQS reports each approximately; the local emulator reports them exactly.
 */
export const messagesLeft = async (sqs: SQSClient, queueUrl: string): Promise<number> => {
  const { Attributes = {} } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: [
        'ApproximateNumberOfMessages',
        'ApproximateNumberOfMessagesNotVisible',
        'ApproximateNumberOfMessagesDelayed',
      ],
    }),
  );
  return (
    Number(Attributes.ApproximateNumberOfMessages ?? 0) +
    Number(Attributes.ApproximateNumberOfMessagesNotVisible ?? 0) +
    Number(Attributes.ApproximateNumberOfMessagesDelayed ?? 0)
  );
};

/**
 * Waits until a queue is empty — its consumer has settled and deleted every message — or `maxMs` has passed,
 * polling every `pollMs`. Resolves to the messages still left (0 once empty).
 */
export const waitForEmptyQueue = async (
  sqs: SQSClient,
  queueUrl: string,
  maxMs: number,
  pollMs = 50,
): Promise<number> => {
  const deadline = Date.now() + maxMs;
  for (;;) {
    const left = await messagesLeft(sqs, queueUrl);
    if (left === 0 || Date.now() >= deadline) return left;
    await new Promise((resolve) => setTimeout(resolve, Math.min(pollMs, deadline - Date.now())));
  }
};

/** Receives (and deletes) up to ten of the messages waiting on a queue now; empty when there are none. */
export const takeMessages = async (sqs: SQSClient, queueUrl: string): Promise<Message[]> => {
  // The emulator's long poll waits out its whole period; a short poll returns as soon as a message is in.
  const { Messages = [] } = await sqs.send(
    new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 0 }),
  );
  if (Messages.length > 0) {
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
      }),
    );
  }
  return Messages;
};

/** Deletes, unread, every message waiting on a queue; resolves to how many there were. */
export const discardMessages = async (sqs: SQSClient, queueUrl: string): Promise<number> => {
  let discarded = 0;
  for (;;) {
    const taken = (await takeMessages(sqs, queueUrl)).length;
    if (taken === 0) return discarded;
    discarded += taken;
  }
};
