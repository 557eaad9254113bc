import {
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { SettlementSink } from '#core/ports.ts';
import type { SettlementRecord } from '#core/settlement.ts';

export interface SqsSettlementSinkOptions {
  /**
   * How long a record may wait for others to share its SendMessageBatch call. 0 batches only records produced
   * in the same event-loop turn (right for classic Lambda, where an instance runs one invocation at a time);
   * a few milliseconds lets a process serving many invocations at once (the local host, multi-concurrency
   * runtimes) amortise the SDK's per-call cost — signing, middleware, a round trip — over up to 10 records.
   * It delays only the invocation's end, never the client's response.
   */
  readonly lingerMs: number;
  /** Attempts per record when SQS reports it failed inside an otherwise successful batch. */
  readonly maxAttempts?: number;
}

interface Pending {
  readonly record: SettlementRecord;
  readonly body: string;
  attempts: number;
  resolve(): void;
  reject(error: unknown): void;
}

/** SQS caps a batch at 10 entries and 256 KiB in total. */
const MAX_ENTRIES = 10;
const MAX_BATCH_BYTES = 256 * 1024;

/**
 * Sends settlement records to the queue in batches. `send` resolves once SQS has accepted the record,
 * so an invocation never ends with its settlement still in memory.
 */
export class SqsSettlementSink implements SettlementSink {
  readonly #client: SQSClient;
  readonly #queueUrl: string;
  readonly #lingerMs: number;
  readonly #maxAttempts: number;
  #queue: Pending[] = [];
  #bytes = 0;
  #timer: NodeJS.Timeout | NodeJS.Immediate | null = null;

  constructor(client: SQSClient, queueUrl: string, options: SqsSettlementSinkOptions) {
    this.#client = client;
    this.#queueUrl = queueUrl;
    this.#lingerMs = options.lingerMs;
    this.#maxAttempts = options.maxAttempts ?? 3;
  }

  send(record: SettlementRecord): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#enqueue({ record, body: JSON.stringify(record), attempts: 0, resolve, reject });
    });
  }

  #enqueue(pending: Pending): void {
    if (this.#bytes + pending.body.length > MAX_BATCH_BYTES) this.#flush();
    this.#queue.push(pending);
    this.#bytes += pending.body.length;
    if (this.#queue.length >= MAX_ENTRIES) this.#flush();
    else if (this.#timer === null) {
      this.#timer =
        this.#lingerMs > 0
          ? setTimeout(() => this.#flush(), this.#lingerMs)
          : setImmediate(() => this.#flush());
    }
  }

  #flush(): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer as NodeJS.Timeout);
      clearImmediate(this.#timer as NodeJS.Immediate);
      this.#timer = null;
    }
    const batch = this.#queue;
    if (batch.length === 0) return;
    this.#queue = [];
    this.#bytes = 0;
    this.#sendBatch(batch).catch((error: unknown) => {
      for (const pending of batch) pending.reject(error);
    });
  }

  async #sendBatch(batch: Pending[]): Promise<void> {
    const entries: SendMessageBatchRequestEntry[] = batch.map((pending, i) => ({
      Id: String(i),
      MessageBody: pending.body,
      MessageAttributes: { settlementId: { DataType: 'String', StringValue: pending.record.id } },
    }));
    const result = await this.#client.send(
      new SendMessageBatchCommand({ QueueUrl: this.#queueUrl, Entries: entries }),
    );
    const failed = new Map((result.Failed ?? []).map((f) => [f.Id, f]));
    batch.forEach((pending, i) => {
      const failure = failed.get(String(i));
      if (!failure) pending.resolve();
      // Sender faults (bad entry) will not improve on retry; throttling and server faults may.
      else if (failure.SenderFault || ++pending.attempts >= this.#maxAttempts) {
        pending.reject(
          new Error(`SQS refused settlement ${pending.record.id}: ${failure.Code} ${failure.Message ?? ''}`),
        );
      } else this.#enqueue(pending);
    });
  }
}
