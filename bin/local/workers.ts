import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { type TransferListItem, Worker } from 'node:worker_threads';
import { grantViolations, isGrantViolation } from './table-grants.ts';

/** A worker thread that reports readiness with its first message and stops on a `stop` message. */
export interface ServiceWorker<T> {
  readonly ready: T;
  /** The worker, for services that keep talking to it after start-up. */
  readonly port: Worker;
  /**
   * Resolves, with why, if the thread ends (or throws) before stop() asked it to — a dead emulator, consumer or
   * simulator the rest of the stack would otherwise keep serving around; never resolves otherwise.
   */
  readonly lost: Promise<Error>;
  /** Whether the thread has ended already, however (a stop, a crash, terminate()). */
  hasEnded(): boolean;
  stop(): Promise<void>;
}

export const startServiceWorker = async <T>(
  script: URL,
  workerData: unknown,
  transferList: readonly TransferListItem[] = [],
): Promise<ServiceWorker<T>> => {
  const worker = new Worker(script, { workerData, transferList: [...transferList] });
  // A call a function's grants refuse in the worker counts as one here (bin/local/table-grants.ts).
  worker.on('message', (message: unknown) => {
    if (isGrantViolation(message)) grantViolations.push(message.grantViolation);
  });
  const ready = await new Promise<T>((resolve, reject) => {
    const onReady = (message: unknown) => {
      if (isGrantViolation(message)) return;
      worker.off('message', onReady);
      resolve(message as T);
    };
    worker.on('message', onReady);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`${script.pathname} exited (${code}) during startup`)));
  });
  let stopping = false;
  const name = script.pathname.split('/').pop();
  const lost = new Promise<Error>((resolve) => {
    worker.on('error', (error) => {
      if (!stopping) resolve(new Error(`${name} failed: ${error.message}`, { cause: error }));
    });
    worker.on('exit', (code) => {
      if (!stopping) resolve(new Error(`${name} exited (${code})`));
    });
  });
  let exited = false;
  const ended = new Promise<void>((resolve) =>
    worker.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  return {
    ready,
    port: worker,
    lost,
    hasEnded: () => exited,
    stop: async () => {
      stopping = true;
      const stopped = new Promise<void>((resolve) => {
        const onMessage = (message: unknown) => {
          if (message !== 'stopped') return;
          worker.off('message', onMessage);
          resolve();
        };
        worker.on('message', onMessage);
      });
      worker.postMessage('stop');
      // A clean stop closes sockets first; terminate() anyway so a stuck worker cannot hold the process.
      // A thread already ended answers nothing: no wait for it.
      await Promise.race([stopped, ended, new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
      await worker.terminate();
    },
  };
};

/**
 * Asks a service worker something and resolves to its reply, the first message carrying `key`. Rejects if the
 * thread ends before it answers: a worker that died (the very event that may start a stop) answers nothing, and a
 * stop waiting on its answer would never end.
 */
export const askWorker = <T>(worker: ServiceWorker<unknown>, request: unknown, key: keyof T): Promise<T> =>
  new Promise<T>((resolve, reject) => {
    const unanswered = () => new Error(`the worker ended before it answered ${JSON.stringify(request)}`);
    if (worker.hasEnded()) {
      reject(unanswered());
      return;
    }
    const onMessage = (message: unknown) => {
      if (typeof message !== 'object' || message === null || !(key in message)) return;
      worker.port.off('message', onMessage);
      worker.port.off('exit', onExit);
      resolve(message as T);
    };
    const onExit = () => {
      worker.port.off('message', onMessage);
      reject(unanswered());
    };
    worker.port.on('message', onMessage);
    worker.port.once('exit', onExit);
    worker.port.postMessage(request);
  });

/** Niceness for threads standing in for work that runs on other machines on AWS. */
const BACKGROUND_NICENESS = 10;

/**
 * Lowers the calling thread's CPU priority. The local host runs on one machine what AWS spreads over many: the
 * SQS and S3 emulators, the settlement sender and the consumer function each do real work per request, but on
 * AWS none of it competes with the handler serving the next request. With this, the kernel gives the request
 * path (and the upstream simulator) the CPU first when both want it. Linux only (a thread's niceness is its
 * own there); elsewhere it does nothing. Returns whether it took effect.
 */
export const lowerThreadPriority = (niceness = BACKGROUND_NICENESS): boolean => {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (!Number.isInteger(tid)) return false;
    setPriority(tid, niceness);
    return true;
  } catch {
    return false;
  }
};

/**
 * Collects what arrives during one turn of the event loop and hands it over as one list at the end of the
 * turn: a message between threads costs both sides more than an item's worth of work.
 */
export const perTurn = <T>(flush: (items: T[]) => void): ((item: T) => void) => {
  let items: T[] = [];
  return (item) => {
    if (items.length === 0)
      setImmediate(() => {
        const batch = items;
        items = [];
        flush(batch);
      });
    items.push(item);
  };
};
