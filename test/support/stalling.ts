/**
 * An upstream for relay tests: it sends `items` and ends — or, given `stallAfter`, sends that many and waits, as a
 * model still working does, until it is closed (the relay closes it for a client gone, or at the call's deadline),
 * and then fails as a closed socket does. `closed` says whether the relay closed it.
 */
export const stallingUpstream = <T>(
  items: readonly T[],
  stallAfter?: number,
): AsyncIterable<T> & { close(): void; readonly closed: boolean } => {
  let release: () => void = () => {};
  const closing = new Promise<void>((resolve) => {
    release = resolve;
  });
  let closed = false;
  return {
    get closed() {
      return closed;
    },
    close() {
      closed = true;
      release();
    },
    async *[Symbol.asyncIterator](): AsyncGenerator<T> {
      yield* items.slice(0, stallAfter ?? items.length);
      if (stallAfter === undefined) return;
      await closing;
      throw new Error('socket closed');
    },
  };
};
