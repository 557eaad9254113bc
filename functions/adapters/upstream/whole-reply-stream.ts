import { randomUUID } from 'node:crypto';
import { UpstreamFailure } from '#core/fallback.ts';
import type { ChatStream, ChatStreamEvent } from '#core/upstream.ts';
import { parseOpenAiUsage } from '#core/usage.ts';
import { bodyTooLarge } from './http.ts';

/**
 * An upstream chat.completion as a reply: at least one choice, each with a message, and no failure reported inside
 * the 200 (an aggregator's top-level `error`, a choice finished with "error"). Relabelled with the public model.
 * Anything else is an `UpstreamFailure` another deployment may make good.
 */
export const chatCompletionOf = (
  body: Record<string, unknown>,
  publicModel: string,
  now: () => number,
): Record<string, unknown> => {
  const choices = body.choices;
  const isMessage = (m: unknown) => typeof m === 'object' && m !== null && !Array.isArray(m);
  if (
    !Array.isArray(choices) ||
    choices.length === 0 ||
    choices.some((c) => !isMessage((c as { message?: unknown } | null)?.message))
  )
    throw new UpstreamFailure('protocol', 'upstream body is not a chat completion');
  if (
    (typeof body.error === 'object' && body.error !== null) ||
    choices.some((c) => (c as { finish_reason?: unknown }).finish_reason === 'error')
  )
    throw new UpstreamFailure('server_error', 'upstream reply reports an error');
  body.model = publicModel;
  // What every chat completion carries, for an upstream that left it out: our replies keep OpenAI's schema.
  if (typeof body.id !== 'string' || body.id === '') body.id = `chatcmpl-${randomUUID().replaceAll('-', '')}`;
  body.object = 'chat.completion';
  if (typeof body.created !== 'number' || !Number.isInteger(body.created))
    body.created = Math.floor(now() / 1000);
  (choices as Choice[]).forEach((choice, i) => {
    if (typeof choice.index !== 'number') choice.index = i;
    if (choice.logprobs === undefined) choice.logprobs = null;
    const message = choice.message;
    if (typeof choice.finish_reason !== 'string')
      choice.finish_reason =
        Array.isArray(message.tool_calls) && message.tool_calls.length > 0 ? 'tool_calls' : 'stop';
    if (typeof message.role !== 'string') message.role = 'assistant';
    if (message.content === undefined) message.content = null;
    if (message.refusal === undefined) message.refusal = null;
  });
  return body;
};

interface Choice {
  index?: unknown;
  message: Record<string, unknown>;
  logprobs?: unknown;
  finish_reason?: unknown;
}

/** The message fields a stream's delta carries, as OpenAI-compatible upstreams stream them. */
const DELTA_FIELDS = ['content', 'reasoning_content', 'reasoning', 'reasoning_details', 'refusal'] as const;

/**
 * A whole chat.completion served as the stream the client asked for, from an upstream that does not stream (it
 * ignores `stream`, or is known to): the chunks OpenAI would have sent for it, all at once — for each choice the
 * opening (role, empty content), its output in one delta (text, shown reasoning, a refusal, its tool calls with their
 * indices), and its finish; then the usage-only chunk, which the relay passes on only to a client that asked for
 * it, and bills either way. A reply whose usage cannot be read has none, and is billed on the relay's count of the
 * output, as a relayed stream without a report is. Its first event came only when the reply was whole (`whole`), so
 * its time to it is the generation's, not the deployment's latency.
 */
export class WholeReplyStream implements ChatStream {
  readonly whole = true;
  readonly #events: ChatStreamEvent[];

  /**
   * `clientWantsUsage`: every chunk but the usage-only one carries `"usage": null`, as OpenAI's do for a client
   * that asked for usage (and as the relay keeps them).
   */
  constructor(completion: Record<string, unknown>, clientWantsUsage: boolean) {
    this.#events = chunksOf(completion, clientWantsUsage ? { usage: null } : {});
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ChatStreamEvent, void, undefined> {
    yield* this.#events;
  }

  /** Nothing to close: the reply was read whole. */
  close(): void {}
}

const chunksOf = (
  completion: Record<string, unknown>,
  noUsage: Record<string, unknown>,
): ChatStreamEvent[] => {
  // As chatCompletionOf left them: each with its index, logprobs and finish reason.
  const choices = completion.choices as Required<Choice>[];
  const chunk = (
    list: readonly Record<string, unknown>[],
    extra: Record<string, unknown> = noUsage,
  ): string =>
    JSON.stringify({
      id: completion.id,
      object: 'chat.completion.chunk',
      created: completion.created,
      model: completion.model,
      ...(typeof completion.system_fingerprint === 'string'
        ? { system_fingerprint: completion.system_fingerprint }
        : {}),
      ...(typeof completion.service_tier === 'string' ? { service_tier: completion.service_tier } : {}),
      choices: list,
      ...extra,
    });
  const event = (data: string, output: readonly string[] = NO_OUTPUT): ChatStreamEvent => ({
    data,
    usage: null,
    usageOnly: false,
    output,
  });
  const events: ChatStreamEvent[] = [
    event(
      chunk(
        choices.map((c) => ({
          index: c.index,
          delta: { role: 'assistant', content: '' },
          logprobs: null,
          finish_reason: null,
        })),
      ),
    ),
  ];
  for (const choice of choices) {
    const { delta, output } = deltaOf(choice.message);
    if (output.length > 0 || Object.keys(delta).length > 0)
      events.push(
        event(
          chunk([{ index: choice.index, delta, logprobs: choice.logprobs, finish_reason: null }]),
          output,
        ),
      );
    events.push(
      event(
        chunk([
          {
            index: choice.index,
            delta: {},
            logprobs: null,
            finish_reason: choice.finish_reason,
          },
        ]),
      ),
    );
  }
  const usage = parseOpenAiUsage(completion.usage);
  if (usage !== null)
    events.push({ data: chunk([], { usage: completion.usage }), usage, usageOnly: true, output: NO_OUTPUT });
  return events;
};

/**
 * A message's output as one delta, and its pieces for the relay's count (each a JSON string's contents, as the relay
 * finds them in a streamed chunk): the fields a stream's deltas carry, where not empty, and its tool calls with the
 * `index` a streamed tool call has.
 */
const deltaOf = (message: Record<string, unknown>) => {
  const delta: Record<string, unknown> = {};
  const output: string[] = [];
  const piece = (text: unknown) => {
    if (typeof text === 'string' && text !== '') output.push(JSON.stringify(text).slice(1, -1));
  };
  for (const field of DELTA_FIELDS) {
    const value = message[field];
    if (value === undefined || value === null || value === '') continue;
    delta[field] = value;
  }
  piece(delta.content);
  // Some servers send the same reasoning under both names: counted once, as the relay counts it.
  piece(delta.reasoning_content ?? delta.reasoning);
  piece(delta.refusal);
  if (Array.isArray(message.tool_calls) && message.tool_calls.length > 0) {
    delta.tool_calls = message.tool_calls.map((call: unknown, index) => {
      const fn = (call as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
      piece(fn?.name);
      piece(fn?.arguments);
      // The call's place in the message, whatever index an upstream may have put on it.
      return { ...(call as Record<string, unknown>), index };
    });
  }
  return { delta, output };
};

const NO_OUTPUT: readonly string[] = [];

/**
 * A response body passed through as it is read, and kept — up to `limitBytes` — until `letGo()`: a body labelled JSON
 * is read as an event stream (some servers label theirs so), and if no event came it was a whole reply, needed whole.
 */
export class KeptBody implements AsyncIterable<Uint8Array> {
  readonly #body: AsyncIterable<Uint8Array>;
  readonly #limitBytes: number;
  #chunks: Uint8Array[] | null = [];
  #size = 0;
  /** Past the limit: nothing more is kept, and the body is too large to be a reply. */
  #over = false;

  constructor(body: AsyncIterable<Uint8Array>, limitBytes: number) {
    this.#body = body;
    this.#limitBytes = limitBytes;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array, void, undefined> {
    for await (const chunk of this.#body) {
      if (this.#chunks !== null && !this.#over) {
        this.#size += chunk.length;
        this.#over = this.#size > this.#limitBytes;
        if (this.#over) this.#chunks = [];
        else this.#chunks.push(chunk);
      }
      yield chunk;
    }
  }

  /** The body read so far (all of it, once read to its end). */
  bytes(): Buffer {
    if (this.#chunks === null) throw new Error('KeptBody: bytes() after letGo()');
    if (this.#over) throw bodyTooLarge(this.#limitBytes);
    return Buffer.concat(this.#chunks, this.#size);
  }

  /** The body is an event stream: nothing more is kept. */
  letGo(): void {
    this.#chunks = null;
  }
}
