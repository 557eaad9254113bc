import type { Readable } from 'node:stream';
import type { CallRecorder } from '#core/call-recorder.ts';
import { billableChatUsage, completionLimit, type PreparedChat } from '#core/chat.ts';
import type { TokenCounter } from '#core/ports.ts';
import type { ChatStream, ChatStreamEvent } from '#core/upstream.ts';
import { openAiChatUsage, type Usage, withinCompletionLimit } from '#core/usage.ts';
import { DEFAULT_STREAM_KEEP_ALIVE_MS } from '#functions/config.ts';
import { failureOf, type RelayProgress, relayBody } from './relay-body.ts';
import { DONE_FRAME, errorFrame, frame } from './sse.ts';

/**
 * The client's event stream: upstream events relayed as they arrive, the usage chunk withheld unless the
 * client asked for it (spec §4 rules 3–4), `[DONE]` at a clean end and an error event at a broken one.
 * The call's outcome is recorded here, because only the relay knows how the stream ended.
 */
export const chatEventStream = (
  stream: ChatStream,
  prepared: PreparedChat,
  call: CallRecorder,
  tokens: TokenCounter,
  /** Sees each usage report as the upstream sent it, and as it is billed (the same object when within limits). */
  onReport: (usage: Usage, billed: Usage) => void = () => {},
  keepAliveMs = DEFAULT_STREAM_KEEP_ALIVE_MS,
): Readable => {
  const progress: RelayProgress = { started: false };
  const tally = new StreamTally(prepared, tokens, onReport, () => stream.promptUsage?.() ?? null);
  const events = relay(stream, prepared, call, progress, tally, keepAliveMs);
  return relayBody(call, events, 16 * 1024, progress, {
    close: () => stream.close(),
    // The client left before the first byte: the prompt was processed for it, nothing was relayed.
    unread: () => call.aborted(tally.billed()),
    cut: () => call.cutAtDeadline(tally.billed()),
  });
};

/**
 * What a stream is billed on: the upstream's usage report once it comes (held to the call's completion limit, as a
 * report above it is billed and shown at the limit), else our count of the output relayed (no report, a client
 * gone, the call's deadline). Output relayed after the last report is beyond it (an upstream that reports early,
 * or a running total that stopped) and is added to it by our count. The output since the last report is kept
 * for that, let go at each report, and counted only when needed: a stream whose report comes last never pays for it. Each piece is a token at least (a delta is the smallest thing a model
 * emits); the text as a whole counts with the tokenizer, so a chunk of many words, or the reasoning a model shows,
 * counts as what it is — never past the limit, which the count need not go beyond.
 */
class StreamTally {
  readonly #prepared: PreparedChat;
  readonly #tokens: TokenCounter;
  readonly #limit: number;
  /**
   * The pieces as written (JSON string contents), joined now and then into one flat string: a piece sliced from
   * its chunk would otherwise keep the whole chunk in memory.
   */
  #text: string[] = [];
  #pieces = 0;
  #reported: Usage | null = null;
  readonly #onReport: (usage: Usage, billed: Usage) => void;
  readonly #promptReport: () => Pick<Usage, 'promptTokens' | 'cachedPromptTokens'> | null;

  constructor(
    prepared: PreparedChat,
    tokens: TokenCounter,
    onReport: (usage: Usage, billed: Usage) => void,
    promptReport: () => Pick<Usage, 'promptTokens' | 'cachedPromptTokens'> | null,
  ) {
    this.#prepared = prepared;
    this.#tokens = tokens;
    this.#limit = completionLimit(prepared);
    this.#onReport = onReport;
    this.#promptReport = promptReport;
  }

  /** The upstream's report, as billed; null until it comes. */
  get reported(): Usage | null {
    return this.#reported;
  }

  /** Takes the upstream's report (the output kept for a count is let go); returns it as billed. */
  report(usage: Usage): Usage {
    this.#reported = billableChatUsage(this.#prepared, usage);
    this.#onReport(usage, this.#reported);
    this.#text = [];
    this.#pieces = 0;
    return this.#reported;
  }

  /** Keeps a relayed event's output for a count. */
  add(event: ChatStreamEvent): void {
    for (const piece of event.output) {
      if (piece === '') continue;
      this.#text.push(piece);
      this.#pieces++;
    }
    if (this.#text.length >= 256) this.#text = [this.#text.join('')];
  }

  /**
   * Our count of the output relayed, within the completion limit, and the prompt as the upstream counted it as the
   * stream began (its cached part at the cached rate) — else our estimate of it.
   */
  estimate(): Usage {
    // A count of 0 is none: a proxy that reports the input side only at the end may send zeros first.
    const reported = this.#promptReport();
    const prompt = reported !== null && reported.promptTokens > 0 ? reported : null;
    const counted: Usage = {
      promptTokens: prompt?.promptTokens ?? this.#prepared.promptTokens,
      completionTokens: this.#outputTokens(),
      cachedPromptTokens: prompt?.cachedPromptTokens ?? 0,
      reasoningTokens: 0,
      source: 'estimated',
    };
    // An upstream's prompt count is held to the prompt's ceiling, as its final report would be.
    return prompt === null
      ? withinCompletionLimit(counted, this.#limit)
      : billableChatUsage(this.#prepared, counted);
  }

  /** Whether output was relayed after the last report, which that report does not cover. */
  get pastReport(): boolean {
    return this.#reported !== null && this.#pieces > 0;
  }

  /** The report if one came (with our count of the output relayed after it), else our count. */
  billed(): Usage {
    if (this.#reported === null) return this.estimate();
    if (this.#pieces === 0) return this.#reported;
    return withinCompletionLimit(
      {
        ...this.#reported,
        completionTokens: this.#reported.completionTokens + this.#outputTokens(),
        source: 'estimated',
      },
      this.#limit,
    );
  }

  #outputTokens(): number {
    if (this.#pieces === 0) return 0;
    if (this.#pieces >= this.#limit) return this.#pieces;
    return Math.max(this.#pieces, this.#tokens.countUpTo(unescaped(this.#text.join('')), this.#limit));
  }
}

/** JSON string contents as text (escapes resolved); as written, should they not parse. */
const unescaped = (contents: string): string => {
  if (!contents.includes('\\')) return contents;
  try {
    return JSON.parse(`"${contents}"`) as string;
  } catch {
    return contents;
  }
};

const KEEP_ALIVE_FRAME = ': keep-alive\n\n';

const QUIET = Symbol('quiet');

/**
 * Tells a relay waiting on its upstream that `ms` have passed since it last heard from it: one timer per stream,
 * pushed back (refreshed) as events come — not a timer per chunk on the hot path. Each wait (`race`) leaves its
 * wake-up in one slot, which the next wait replaces: a promise the relay raced every read against for the whole
 * stream (as `Promise.race` does) would gather a reaction per chunk, each holding that read's chunk, until the first
 * quiet spell — a long, busy stream's every chunk kept in memory.
 */
class Silence {
  readonly #ms: number;
  #timer: NodeJS.Timeout | null = null;
  /** Whether the timer will fire: it is re-armed by the first wait after it has. */
  #armed = false;
  #wake: ((value: typeof QUIET) => void) | null = null;

  constructor(ms: number) {
    this.#ms = ms;
  }

  /** `pending`'s outcome, or QUIET once `ms` pass without `heard()`, whichever comes first. */
  race<T>(pending: Promise<T>): Promise<T | typeof QUIET> {
    if (!this.#armed) {
      this.#armed = true;
      if (this.#timer === null) {
        this.#timer = setTimeout(() => this.#fire(), this.#ms);
        this.#timer.unref();
      } else this.#timer.refresh();
    }
    return new Promise<T | typeof QUIET>((resolve, reject) => {
      this.#wake = resolve;
      pending.then(resolve, reject);
    });
  }

  heard(): void {
    this.#wake = null;
    this.#timer?.refresh();
  }

  stop(): void {
    this.#wake = null;
    if (this.#timer !== null) clearTimeout(this.#timer);
  }

  #fire(): void {
    const wake = this.#wake;
    this.#armed = false;
    this.#wake = null;
    wake?.(QUIET);
  }
}

async function* relay(
  stream: ChatStream,
  prepared: PreparedChat,
  call: CallRecorder,
  progress: RelayProgress,
  tally: StreamTally,
  keepAliveMs: number,
): AsyncGenerator<string> {
  progress.started = true;
  /** The last chunk relayed: a usage chunk we add takes its id, creation time and model. */
  let lastData: string | null = null;
  let finished = false;
  const upstream = stream[Symbol.asyncIterator]();
  const silence = new Silence(keepAliveMs);
  try {
    for (;;) {
      let next: IteratorResult<ChatStreamEvent, void> | typeof QUIET;
      const pending = upstream.next();
      // A client gone during a keep-alive ends this generator at that `yield`, with the read still pending: its
      // failure (the body closes the upstream) is nobody's to handle.
      pending.catch(() => {});
      for (;;) {
        // Only errors from the upstream side are caught here. When the client goes away, the stream machinery
        // throws into this generator at a `yield` instead; that unwinds to `finally` as an abort.
        try {
          next = await silence.race(pending);
        } catch (error) {
          const cause = failureOf(progress, error);
          if (cause === null) return; // the client left: an abort, recorded below
          finished = true;
          if (progress.outOfTime) call.cutAtDeadline(tally.billed());
          else call.interrupted(cause, tally.reported);
          yield errorFrame(cause);
          return;
        }
        if (next !== QUIET) break;
        yield KEEP_ALIVE_FRAME;
      }
      silence.heard();
      if (next.done) break;
      const event = next.value;
      lastData = event.data;
      if (event.usage === null) {
        tally.add(event);
        yield frame(event.data);
      } else {
        const usage = tally.report(event.usage);
        // A report above the call's limits is billed, and shown, at them.
        const data = usage === event.usage ? event.data : withUsage(event.data, usage);
        if (prepared.clientWantsUsage) yield frame(data);
        else if (!event.usageOnly) yield frame(withoutUsage(data));
      }
    }
    finished = true;
    if (tally.reported === null || tally.pastReport) {
      // No usage chunk, or output after the last report: bill our count (added to the report), and show it to a
      // client that asked for usage — the last usage it saw is not what the stream is billed on.
      const counted = tally.billed();
      call.succeeded(counted);
      if (prepared.clientWantsUsage)
        yield frame(usageChunk(lastData, call.requestId, prepared.request.model, counted));
    } else call.succeeded(tally.reported);
    yield DONE_FRAME;
  } finally {
    silence.stop();
    // Unfinished here means the consumer stopped reading: the client went away.
    if (!finished) call.aborted(tally.billed());
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
