/**
 * Work that must run once the client's response has ended — settlement above all — without adding to
 * the client's latency, yet before the invocation returns (Lambda may freeze the instance as soon as the
 * handler's promise settles, so fire-and-forget would lose it). Tasks are keyed by the invocation's
 * context object and drained by middy's `requestEnd` hook, which runs after the response stream is closed.
 */
type Task = () => Promise<void>;

const pending = new WeakMap<object, Task[]>();

export const afterResponse = (context: object, task: Task): void => {
  const tasks = pending.get(context);
  if (tasks) tasks.push(task);
  else pending.set(context, [task]);
};

/** middy plugin hook: runs the invocation's tasks in order. A task reports its own failures. */
export const runAfterResponse = async (request: { context: object }): Promise<void> => {
  const tasks = pending.get(request.context);
  if (!tasks) return;
  pending.delete(request.context);
  for (const task of tasks) await task();
};
