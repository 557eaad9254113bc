import type { Readable } from 'node:stream';
import type { CallRecorder } from '#core/call-recorder.ts';
import { completionLimit, type PreparedChat } from '#core/chat.ts';
import type { ChatStream, ChatStreamEvent } from '#core/upstream.ts';
import { openAiChatUsage, type Usage, withinCompletionLimit } from '#core/usage.ts';
import { failureOf, type RelayProgress, relayBody } from './relay-body.ts';
import { DONE_FRAME, errorFrame, frame } from './sse.ts';

/**
 * The client's event stream: upstream events relayed as they arrive, the usage chunk withheld unless the
 * client asked for it (spec §4 rules 3–4), `[DONE]` at a clean end and an error event at a broken one.
 * The call's outcome is recorded here, because only the relay knows how the stream ended.
 */
export const chatEventStream = (stream: ChatStream, prepared: PreparedChat, call: CallRecorder): Readable => {
  const progress: RelayProgress = { started: false };
  return relayBody(call, relay(stream, prepared, call, progress), 16 * 1024, progress, {
    close: () => stream.close(),
    // The client left before the first byte: the prompt was processed for it, nothing was relayed.
    unread: () => call.aborted(estimatedUsage(prepared, 0)),
  });
};

async function* relay(
  stream: ChatStream,
  prepared: PreparedChat,
  call: CallRecorder,
  progress: RelayProgress,
): AsyncGenerator<string> {
  progress.started = true;
  let usage: Usage | null = null;
  /** The last chunk relayed: a usage chunk we add takes its id, creation time and model. */
  let lastData: string | null = null;
  let contentChunks = 0;
  let finished = false;
  const limit = completionLimit(prepared);
  const upstream = stream[Symbol.asyncIterator]();
  try {
    for (;;) {
      // Only errors from the upstream side are caught here. When the client goes away, the stream machinery
      // throws into this generator at a `yield` instead; that unwinds to `finally` as an abort.
      let next: IteratorResult<ChatStreamEvent, void>;
      try {
        next = await upstream.next();
      } catch (error) {
        const cause = failureOf(progress, error);
        if (cause === null) return; // the client left: an abort, recorded below
        finished = true;
        call.interrupted(cause, usage);
        yield errorFrame(cause);
        return;
      }
      if (next.done) break;
      const event = next.value;
      lastData = event.data;
      contentChunks += event.contentChunks;
      if (event.usage === null) yield frame(event.data);
      else {
        usage = withinCompletionLimit(event.usage, limit);
        // A report above the call's limit is billed, and shown, at the limit.
        const data = usage === event.usage ? event.data : withUsage(event.data, usage);
        if (prepared.clientWantsUsage) yield frame(data);
        else if (!event.usageOnly) yield frame(withoutUsage(data));
      }
    }
    finished = true;
    if (usage === null) {
      // The upstream sent no usage chunk: bill our count, and show it to a client that asked for usage.
      const counted = estimatedUsage(prepared, contentChunks);
      call.succeeded(counted);
      if (prepared.clientWantsUsage)
        yield frame(usageChunk(lastData, call.requestId, prepared.request.model, counted));
    } else call.succeeded(usage);
    yield DONE_FRAME;
  } finally {
    // Unfinished here means the consumer stopped reading: the client went away.
    if (!finished) call.aborted(usage ?? estimatedUsage(prepared, contentChunks));
    stream.close();
  }
}

/** The final usage chunk OpenAI sends with `include_usage`, for a stream whose upstream sent none. */
const usageChunk = (lastData: string | null, requestId: string, model: string, usage: Usage): string => {
  let last: Record<string, unknown> = {};
  try {
    last = lastData ? (JSON.parse(lastData) as Record<string, unknown>) : {};
  } catch {
    // Not JSON: keep the fallbacks below.
  }
  return JSON.stringify({
    id: typeof last.id === 'string' ? last.id : `chatcmpl-${requestId}`,
    object: 'chat.completion.chunk',
    created: typeof last.created === 'number' ? last.created : Math.floor(Date.now() / 1000),
    model: typeof last.model === 'string' ? last.model : model,
    ...(typeof last.system_fingerprint === 'string' ? { system_fingerprint: last.system_fingerprint } : {}),
    choices: [],
    usage: openAiChatUsage(usage),
  });
};

/** A chunk with its usage replaced. */
const withUsage = (data: string, usage: Usage): string =>
  JSON.stringify({ ...(JSON.parse(data) as Record<string, unknown>), usage: openAiChatUsage(usage) });

/** Some providers put usage on a content chunk; a client that did not ask gets the chunk without it. */
const withoutUsage = (data: string): string => {
  const chunk = JSON.parse(data) as Record<string, unknown>;
  delete chunk.usage;
  return JSON.stringify(chunk);
};

/**
 * Usage when the upstream sent none (or the client left early): the prompt estimate plus one token per
 * text delta relayed, which is how chat-completions streams are chunked.
 */
const estimatedUsage = (prepared: PreparedChat, contentChunks: number): Usage => ({
  promptTokens: prepared.promptTokens,
  completionTokens: contentChunks,
  cachedPromptTokens: 0,
  reasoningTokens: 0,
  source: 'estimated',
});
