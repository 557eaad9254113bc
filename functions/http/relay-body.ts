import { Readable } from 'node:stream';
import type { CallRecorder } from '#core/call-recorder.ts';
import { UpstreamFaultError } from '#core/errors.ts';

/** Shared by a relay generator and its body. */
export interface RelayProgress {
  /** Set by the generator as its first statement: the body was read. */
  started: boolean;
  /** Set by the body when it is destroyed before the generator ended: the client went away. */
  gone?: boolean;
  /** Set when the call's deadline (CallRecorder.endBy) came with the upstream still streaming. */
  outOfTime?: boolean;
}

/**
 * Cuts a relayed stream at the call's deadline: marks the progress and closes the upstream, whose pending read
 * then fails into the relay, which ends the stream as interrupted and so lets the invocation settle in time.
 * Returns the timer's cancel.
 */
export const deadlineFor = (call: CallRecorder, progress: RelayProgress, close: () => void): (() => void) => {
  if (call.endBy === null) return () => {};
  const timer = setTimeout(
    () => {
      progress.outOfTime = true;
      close();
    },
    Math.max(0, call.endBy - Date.now()),
  );
  timer.unref();
  return () => clearTimeout(timer);
};

/** What a stream cut at its deadline tells the client, as its final event. */
export const deadlineError = (): UpstreamFaultError =>
  new UpstreamFaultError(
    'The response ran into the longest time a call may take and was cut off; it is incomplete and not charged.',
  );

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
  gone: () => void,
): Readable => {
  const body = Readable.from(relay, { objectMode: false, highWaterMark });
  // A client that leaves mid-stream gets the body destroyed, which returns the generator — but only at its next
  // `yield`: while it awaits the upstream (a model thinking, a long pause) nothing reaches it, and it would learn
  // of the hang-up only from the upstream's next event or its idle timeout, and take it for a broken upstream.
  // The body's destroy is where the hang-up is known at once: `gone` abandons the upstream read, and the
  // generator, seeing `progress.gone`, ends as an abort.
  const destroy = body._destroy.bind(body);
  let ended = false;
  body.once('end', () => {
    ended = true;
  });
  body._destroy = (error, callback) => {
    if (progress.started && !ended && !progress.gone) {
      progress.gone = true;
      gone();
    }
    destroy(error, callback);
  };
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
