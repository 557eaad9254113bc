import { running } from '#local/emulators.ts';
import { readStackFile, STACK_FILE, type StackFile } from '#local/stack-file.ts';
import { UsageError } from './usage-error.ts';

/**
 * The stack `npm start` is running, from the file it keeps while it runs; null when there is none. A file left by a
 * stack that is gone (killed outright: no exit handler ran) names emulators nobody serves: a command sent there would
 * fail as the store unreachable, "run it again" (75), and again for ever. It is refused as no target (2), saying so.
 */
export const runningLocalStack = (): StackFile | null => {
  let stack: StackFile | null;
  try {
    stack = readStackFile();
  } catch {
    throw new UsageError(
      `No target: ${STACK_FILE} is unreadable; start the local stack (npm start), which rewrites it.`,
    );
  }
  if (stack?.pid !== undefined && !running(stack.pid))
    throw new UsageError(
      `No target: the local stack that wrote ${STACK_FILE} (pid ${stack.pid}) is no longer running; start it (npm start).`,
    );
  return stack;
};
