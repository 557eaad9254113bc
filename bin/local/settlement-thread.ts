import { MessageChannel, type MessagePort, type Worker } from 'node:worker_threads';
import type { SQSClientConfig } from '@aws-sdk/client-sqs';
import type { SettlementSink } from '#core/ports.ts';
import type { SettlementRecord } from '#core/settlement.ts';
import type { AttachPort, SettlementAck, SettlementHandoff } from './settlement-worker.ts';
import { perTurn, type ServiceWorker, startServiceWorker } from './workers.ts';

/** The two ends records can travel over: the thread itself, or a port attached to it. */
type Port = MessagePort | Worker;

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
  /** The thread, when this sink started it (and stops it). */
  readonly #worker: ServiceWorker<'ready'> | null;
  readonly #port: Port;
  readonly #pending = new Map<number, { resolve(): void; reject(error: Error): void }>();
  #next = 0;
  readonly #handOver: (handoff: SettlementHandoff) => void;

  private constructor(worker: ServiceWorker<'ready'> | null, port: Port) {
    this.#worker = worker;
    this.#port = port;
    this.#handOver = perTurn((batch) => port.postMessage(batch));
    // Both kinds of port deliver 'message' events alike; one signature serves both.
    (port as MessagePort).on('message', (message: readonly SettlementAck[] | 'stopped') => {
      if (message === 'stopped') return;
      for (const ack of message) {
        const pending = this.#pending.get(ack.id);
        this.#pending.delete(ack.id);
        if (ack.error === undefined) pending?.resolve();
        else pending?.reject(new Error(ack.error));
      }
    });
  }

  /** Resolves, with why, if the thread this sink started ends before it is stopped (ServiceWorker.lost). */
  get lost(): Promise<Error> {
    return this.#worker?.lost ?? new Promise<Error>(() => {});
  }

  static async start(options: {
    client: SQSClientConfig;
    queueUrl: string;
    lingerMs: number;
  }): Promise<ThreadedSettlementSink> {
    const worker = await startServiceWorker<'ready'>(
      new URL('./settlement-worker.ts', import.meta.url),
      options,
    );
    return new ThreadedSettlementSink(worker, worker.port);
  }

  /**
   * A port to the same thread for another gateway instance (a worker thread: transfer it there and wrap it
   * with `over`), so every instance's records share the thread's batches.
   */
  attach(): MessagePort {
    if (!this.#worker) throw new Error('only the sink that started the thread can attach others to it');
    const { port1, port2 } = new MessageChannel();
    this.#worker.port.postMessage({ attach: port2 } satisfies AttachPort, [port2]);
    return port1;
  }

  /** A sink over a port from `attach`. */
  static over(port: MessagePort): ThreadedSettlementSink {
    return new ThreadedSettlementSink(null, port);
  }

  send(record: SettlementRecord): Promise<void> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#handOver({ id, record });
    });
  }

  async stop(): Promise<void> {
    if (this.#worker) await this.#worker.stop();
    else (this.#port as MessagePort).close();
  }
}
