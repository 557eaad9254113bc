import { Readable } from 'node:stream';
import type { CallRecorder } from '#core/call-recorder.ts';

/** Set by a relay generator as its first statement: whether the body was ever read. */
export interface RelayProgress {
  started: boolean;
}

/**
 * A response body read from a relay generator that records the call's outcome in its `finally`.
 *
 * When the client hangs up before the response begins (while the call is authenticated, admitted, or waits for
 * the upstream's first byte), the runtime finds the response stream already closed and destroys the body
 * without reading it. A generator that never started never reaches its `finally`, so the call would end with no
 * outcome (settled as an internal error, charging nothing) and the upstream response would stay open. `unread`
 * does what that `finally` would have done, once.
 */
export const relayBody = <T>(
  call: CallRecorder,
  relay: AsyncGenerator<T>,
  highWaterMark: number,
  progress: RelayProgress,
  unread: () => void,
): Readable => {
  const body = Readable.from(relay, { objectMode: false, highWaterMark });
  let done = false;
  const once = () => {
    if (done || progress.started) return;
    done = true;
    unread();
  };
  // Whichever comes first: the runtime destroying the body unread, or the invocation ending without having
  // piped it at all (a response stream already closed refuses the pipe before touching the body).
  body.once('close', once);
  call.onUnread(once);
  return body;
};
