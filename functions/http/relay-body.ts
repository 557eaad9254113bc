import { Readable } from 'node:stream';
import type { CallRecorder } from '#core/call-recorder.ts';
import { UpstreamFaultError } from '#core/errors.ts';

/** Shared by a relay generator and its body. */
export interface RelayProgress {
  /** Set by the generator as its first statement: the body was read. */
  started: boolean;
  /** Set by the body when it is destroyed before the generator ended: the client went away. */
  gone?: boolean;
  /**
   * Set when the call's deadline (CallRecorder.endBy) came with the upstream still streaming: the relay records
   * it with CallRecorder.cutAtDeadline.
   */
  outOfTime?: boolean;
}

/** What the body does to the relay's upstream, and what it records for a body never read. */
export interface RelayHandlers {
  /** Abandons the upstream response (idempotent). */
  close(): void;
  /** Records the outcome of a call whose body was never read (the client left before the first byte). */
  unread(): void;
  /** Records the call as cut at its deadline, with what it relayed so far (CallRecorder.cutAtDeadline). */
  cut(): void;
}

/**
 * How long after its deadline a body whose reader has stopped reading is destroyed. The relay learns of the cut
 * only when it reads the upstream again, and a relay held at a `yield` by a reader that reads nothing never does:
 * without this, Lambda would kill the invocation 10 s later, unsettled — its output free.
 */
const STUCK_READER_GRACE_MS = 2_000;

/**
 * Why a relay's upstream read failed, as the relay should end: null when the client went away (the body closed
 * the upstream: an abort, recorded by the relay's `finally`), the deadline's error when the call ran out of time,
 * else the upstream's own error.
 */
export const failureOf = (progress: RelayProgress, error: unknown): unknown =>
  progress.gone ? null : progress.outOfTime ? deadlineError() : error;

/**
 * What a stream cut at its deadline tells the client, as its final event. Charged like a response the client
 * walked away from (CallRecorder.cutAtDeadline): what it received was produced for it.
 */
const deadlineError = (): UpstreamFaultError =>
  new UpstreamFaultError(
    'The response ran into the longest time a call may take and was cut off; it is incomplete, and charged for ' +
      'the prompt and the output sent up to the cut. Ask for less output (max_tokens), or read the stream faster.',
  );

/**
 * A response body read from a relay generator that records the call's outcome in its `finally`. Besides reading
 * it, the body watches for what the generator cannot see while it awaits the upstream:
 *
 * - **A body never read.** When the client hangs up before the response begins (while the call is authenticated,
 *   admitted, or waits for the upstream's first byte), the runtime finds the response stream already closed and
 *   destroys the body without reading it. A generator that never started never reaches its `finally`, so the
 *   call would end with no outcome (settled as an internal error, charging nothing) and the upstream response
 *   would stay open. `unread` does what that `finally` would have done, once, and the upstream is closed.
 * - **A client that leaves mid-stream.** Its body is destroyed, which returns the generator — but only at its
 *   next `yield`: while it awaits the upstream (a model thinking, a long pause) nothing reaches it, and it would
 *   learn of the hang-up only from the upstream's next event or its idle timeout, and take it for a broken
 *   upstream. The body's destroy is where the hang-up is known at once: it marks `progress.gone` and closes the
 *   upstream, and the generator's failed read ends as an abort (failureOf).
 * - **The call's deadline** (CallRecorder.endBy): Lambda kills an invocation at its timeout, the work after the
 *   response included, so the stream is cut before then — `progress.outOfTime`, the upstream closed — and the
 *   generator ends it with an error event, recorded as cut at the deadline (charged for what it sent), in time for
 *   the invocation to settle. A reader that has stopped reading holds the generator at a `yield`, where it cannot
 *   see the cut: shortly after, the body records it (`cut`) and is destroyed.
 */
export const relayBody = <T>(
  call: CallRecorder,
  relay: AsyncGenerator<T>,
  highWaterMark: number,
  progress: RelayProgress,
  handlers: RelayHandlers,
): Readable => {
  const body = Readable.from(relay, { objectMode: false, highWaterMark });
  let stuck: NodeJS.Timeout | undefined;
  const deadline =
    call.endBy === null
      ? null
      : setTimeout(
          () => {
            progress.outOfTime = true;
            handlers.close();
            stuck = setTimeout(() => {
              if (body.destroyed) return;
              handlers.cut();
              body.destroy();
            }, STUCK_READER_GRACE_MS);
            stuck.unref();
          },
          Math.max(0, call.endBy - Date.now()),
        );
  deadline?.unref();

  const destroy = body._destroy.bind(body);
  let ended = false;
  body.once('end', () => {
    ended = true;
  });
  body._destroy = (error, callback) => {
    if (progress.started && !ended && !progress.gone) {
      progress.gone = true;
      handlers.close();
    }
    destroy(error, callback);
  };

  let done = false;
  const finish = () => {
    clearTimeout(deadline ?? undefined);
    clearTimeout(stuck);
    if (done || progress.started) return;
    done = true;
    handlers.unread();
    handlers.close();
  };
  // Whichever comes first: the body closing (read to its end, destroyed, or destroyed unread), or the invocation
  // ending without having piped it at all (a response stream already closed refuses the pipe before touching it).
  body.once('close', finish);
  call.onUnread(finish);
  return body;
};
