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
