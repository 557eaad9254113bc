import type { SQSClientConfig } from '@aws-sdk/client-sqs';
import type { SettlementSink } from '#core/ports.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import type { SettlementAck, SettlementHandoff } from './settlement-worker.ts';
import { type ServiceWorker, startServiceWorker } from './workers.ts';

/**
 * The local host's settlement sink: records go to a worker thread that runs the functions' own
 * SqsSettlementSink. On AWS every request has its Lambda instance to itself, so the SQS call an invocation
 * makes after its response cannot delay anybody else's request; the local host serves all invocations on one
 * thread, and without this the SDK's work (signing, serialising, a round trip) would sit in front of unrelated
 * requests — an interference the real service does not have. `send` still resolves only once SQS accepted the
 * record, so the invocation's end waits for it exactly as on Lambda. The records of one event-loop turn cross
 * to the thread in one message, and their acknowledgements come back the same way: a message between threads
 * costs both sides more than a record's worth of work.
 */
export class ThreadedSettlementSink implements SettlementSink {
  readonly #worker: ServiceWorker<'ready'>;
  readonly #pending = new Map<number, { resolve(): void; reject(error: Error): void }>();
  #next = 0;
  /** Records of the current turn, posted together at its end. */
  #outgoing: SettlementHandoff[] = [];

  private constructor(worker: ServiceWorker<'ready'>) {
    this.#worker = worker;
    worker.port.on('message', (message: readonly SettlementAck[] | 'stopped') => {
      if (message === 'stopped') return;
      for (const ack of message) {
        const pending = this.#pending.get(ack.id);
        this.#pending.delete(ack.id);
        if (ack.error === undefined) pending?.resolve();
        else pending?.reject(new Error(ack.error));
      }
    });
  }

  static async start(options: {
    client: SQSClientConfig;
    queueUrl: string;
    lingerMs: number;
  }): Promise<ThreadedSettlementSink> {
    return new ThreadedSettlementSink(
      await startServiceWorker<'ready'>(new URL('./settlement-worker.ts', import.meta.url), options),
    );
  }

  send(record: SettlementRecord): Promise<void> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      if (this.#outgoing.length === 0) setImmediate(() => this.#post());
      this.#outgoing.push({ id, record });
    });
  }

  #post(): void {
    const batch = this.#outgoing;
    this.#outgoing = [];
    this.#worker.port.postMessage(batch);
  }

  stop(): Promise<void> {
    return this.#worker.stop();
  }
}
