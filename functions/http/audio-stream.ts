import type { Readable } from 'node:stream';
import type { CallRecorder } from '#core/call-recorder.ts';
import type { AudioStream } from '#core/upstream.ts';
import type { Usage } from '#core/usage.ts';
import { failureOf, type RelayProgress, relayBody } from './relay-body.ts';

/**
 * The client's audio: upstream chunks relayed as they arrive. Binary audio has no error event, so an upstream
 * that breaks part-way makes the response fail (the connection is cut before the chunked terminator, which
 * every HTTP client reports as an error) rather than end cleanly short. The call's outcome is recorded here,
 * where it is known: complete, interrupted (not charged), or abandoned by the client or cut at the call's
 * deadline (charged, as chat).
 */
export const audioBody = (stream: AudioStream, call: CallRecorder, usage: Usage): Readable => {
  const progress: RelayProgress = { started: false };
  return relayBody(call, relay(stream, call, usage, progress), 64 * 1024, progress, {
    close: () => stream.close(),
    // The client left before the first byte: charged as any abandoned speech call (the input was read).
    unread: () => call.aborted(usage),
    cut: () => call.cutAtDeadline(usage),
  });
};

async function* relay(
  stream: AudioStream,
  call: CallRecorder,
  usage: Usage,
  progress: RelayProgress,
): AsyncGenerator<Uint8Array> {
  progress.started = true;
  let finished = false;
  const upstream = stream[Symbol.asyncIterator]();
  try {
    for (;;) {
      let next: IteratorResult<Uint8Array, void>;
      try {
        next = await upstream.next();
      } catch (error) {
        const cause = failureOf(progress, error);
        if (cause === null) return; // the client left: an abort, recorded below
        finished = true;
        if (progress.outOfTime) call.cutAtDeadline(usage);
        else call.interrupted(cause, null);
        throw cause;
      }
      if (next.done) break;
      yield next.value;
    }
    finished = true;
    call.succeeded(usage);
  } finally {
    if (!finished) call.aborted(usage);
    stream.close();
  }
}
