import {
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { SettlementSink } from '#core/ports.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import {
  encodeSettlementMessage,
  encodeSettlementRecord,
  settlementMessageLength,
} from './settlement-codec.ts';

export interface SqsSettlementSinkOptions {
  /**
   * How long a record may wait for others to share its SendMessageBatch call. 0 batches only records produced
   * in the same event-loop turn (right for classic Lambda, where an instance runs one invocation at a time);
   * a few milliseconds lets a process serving many invocations at once (the local host, multi-concurrency
   * runtimes) amortise the SDK's per-call cost — signing, middleware, a round trip — and SQS's per-message
   * cost over every record that arrives meanwhile.
   * It delays only the invocation's end, never the client's response.
   */
  readonly lingerMs: number;
  /** Attempts per record when SQS reports it failed inside an otherwise successful batch. */
  readonly maxAttempts?: number;
}

interface Pending {
  readonly record: SettlementRecord;
  readonly body: string;
  /** UTF-8 bytes of `body`: SQS's limits count bytes, and a record's text need not be ASCII. */
  readonly bytes: number;
  attempts: number;
  resolve(): void;
  reject(error: unknown): void;
}

/** SQS caps a call at 10 entries and 256 KiB in total. */
const MAX_ENTRIES = 10;
const MAX_BATCH_BYTES = 256 * 1024;
/** SQS bills a message per 64 KiB: records share a message up to that size. */
const MAX_MESSAGE_BYTES = 64 * 1024;

/** The records one queue message carries. */
type Message = readonly Pending[];

/**
 * Sends settlement records to the queue, as few messages and calls as the records waiting allow: records that
 * are ready together share a message (settlement-codec.ts), messages share a SendMessageBatch call. `send`
 * resolves once SQS has accepted the record, so an invocation never ends with its settlement still in memory.
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
    const body = encodeSettlementRecord(record);
    return new Promise((resolve, reject) => {
      this.#enqueue({ record, body, bytes: Buffer.byteLength(body), attempts: 0, resolve, reject });
    });
  }

  #enqueue(pending: Pending): void {
    this.#queue.push(pending);
    this.#bytes += pending.bytes + 1;
    // A full call's worth goes at once; less waits for the linger time (or the end of this turn).
    if (this.#bytes >= MAX_BATCH_BYTES) this.#flush();
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
    const waiting = this.#queue;
    this.#queue = [];
    this.#bytes = 0;
    for (const call of calls(messages(waiting))) {
      this.#sendBatch(call).catch((error: unknown) => {
        for (const message of call) for (const pending of message) pending.reject(error);
      });
    }
  }

  async #sendBatch(call: readonly Message[]): Promise<void> {
    const entries: SendMessageBatchRequestEntry[] = call.map((message, i) => ({
      Id: String(i),
      MessageBody: encodeSettlementMessage(message.map((pending) => pending.body)),
    }));
    const result = await this.#client.send(
      new SendMessageBatchCommand({ QueueUrl: this.#queueUrl, Entries: entries }),
    );
    const failed = new Map((result.Failed ?? []).map((f) => [f.Id, f]));
    call.forEach((message, i) => {
      const failure = failed.get(String(i));
      for (const pending of message) {
        if (!failure) pending.resolve();
        // Sender faults (bad entry) will not improve on retry; throttling and server faults may.
        else if (failure.SenderFault || ++pending.attempts >= this.#maxAttempts) {
          pending.reject(
            new Error(
              `SQS refused settlement ${pending.record.id}: ${failure.Code} ${failure.Message ?? ''}`,
            ),
          );
        } else this.#enqueue(pending);
      }
    });
  }
}

/**
 * Splits items, in order, into runs that `fits` accepts given their count and summed size; an item that fits
 * nowhere forms a run of its own.
 */
const runs = <T>(
  items: readonly T[],
  size: (item: T) => number,
  fits: (count: number, bytes: number) => boolean,
): T[][] => {
  const all: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const length = size(item);
    if (current.length > 0 && !fits(current.length + 1, bytes + length)) {
      all.push(current);
      current = [];
      bytes = 0;
    }
    current.push(item);
    bytes += length;
  }
  if (current.length > 0) all.push(current);
  return all;
};

/** Packs records, in order, into messages of at most MAX_MESSAGE_BYTES (a larger record goes alone). */
const messages = (waiting: readonly Pending[]): Message[] =>
  runs(
    waiting,
    (pending) => pending.bytes,
    (count, bytes) => settlementMessageLength(bytes, count) <= MAX_MESSAGE_BYTES,
  );

/** Groups messages into SendMessageBatch calls within SQS's entry and size caps. */
const calls = (all: readonly Message[]): Message[][] =>
  runs(
    all,
    (message) =>
      settlementMessageLength(
        message.reduce((sum, pending) => sum + pending.bytes, 0),
        message.length,
      ),
    (count, bytes) => count <= MAX_ENTRIES && bytes <= MAX_BATCH_BYTES,
  );
