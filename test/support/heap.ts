import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** V8's collector, exposed once for tests that measure what stays reachable. */
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** The heap in use once everything unreachable has been collected (twice: weak references clear in the second). */
export const heapAfterCollection = (): number => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};
