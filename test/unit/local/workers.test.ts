import { readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';

/** Niceness of the calling thread (field 19 of its /proc stat line). */
const ownNiceness = (): number =>
  Number(readFileSync('/proc/thread-self/stat', 'utf8').split(') ')[1]?.split(' ')[16]);

const WORKERS_MODULE = new URL('../../../bin/local/workers.ts', import.meta.url).href;

describe.runIf(process.platform === 'linux')('lowerThreadPriority', () => {
  it('lowers the calling thread’s priority, and only that thread’s', async () => {
    const before = ownNiceness();
    const worker = new Worker(
      `const { parentPort } = require('node:worker_threads');
       const { readFileSync } = require('node:fs');
       import('${WORKERS_MODULE}').then(({ lowerThreadPriority }) => {
         const applied = lowerThreadPriority(7);
         const nice = Number(readFileSync('/proc/thread-self/stat', 'utf8').split(') ')[1].split(' ')[16]);
         parentPort.postMessage({ applied, nice });
       });`,
      { eval: true },
    );
    const result = await new Promise((resolve) => worker.once('message', resolve));
    await worker.terminate();
    expect(result).toEqual({ applied: true, nice: 7 });
    expect(ownNiceness()).toBe(before);
  });
});

describe('startServiceWorker', () => {
  /** A worker script (as a data: URL module) that reports ready, then does `after`. */
  const script = (after: string) =>
    new URL(
      `data:text/javascript,${encodeURIComponent(
        `import { parentPort } from 'node:worker_threads';
         parentPort.postMessage('ready');
         parentPort.on('message', (m) => { if (m === 'stop') { parentPort.postMessage('stopped'); } });
         ${after}`,
      )}`,
    );

  it('tells when the thread dies on its own after start-up, with why', async () => {
    const { startServiceWorker } = await import('#local/workers.ts');
    const worker = await startServiceWorker<'ready'>(
      script(`setTimeout(() => { throw new Error('emulator crashed'); }, 20);`),
      null,
    );
    const lost = await worker.lost;
    expect(lost.message).toContain('emulator crashed');
    await worker.stop();
  });

  it('tells nothing of a thread stopped on purpose', async () => {
    const { startServiceWorker } = await import('#local/workers.ts');
    const worker = await startServiceWorker<'ready'>(script(''), null);
    await worker.stop();
    const told = await Promise.race([
      worker.lost,
      new Promise((resolve) => setTimeout(resolve, 100, 'nothing')),
    ]);
    expect(told).toBe('nothing');
  });

  it('answers a question, and refuses to wait on a thread that ended before answering (a stop after a crash)', async () => {
    const { askWorker, startServiceWorker } = await import('#local/workers.ts');
    const worker = await startServiceWorker<'ready'>(
      script(`parentPort.on('message', (m) => {
         if (m === 'served') parentPort.postMessage({ served: 3 });
         if (m === 'die') process.exit(3);
       });`),
      null,
    );
    expect(await askWorker<{ served: number }>(worker, 'served', 'served')).toEqual({ served: 3 });
    // Asked as it dies: the answer never comes, and the question ends instead of hanging.
    await expect(askWorker<{ drained: unknown }>(worker, 'die', 'drained')).rejects.toThrow(
      /ended before it answered/,
    );
    // Asked after it died.
    await expect(askWorker<{ served: number }>(worker, 'served', 'served')).rejects.toThrow(/ended/);
    expect((await worker.lost).message).toContain('exited (3)');
    await worker.stop();
  });
});
