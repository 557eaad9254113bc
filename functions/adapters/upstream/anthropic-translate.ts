import { type ChatMessage, type ContentPart, DEFAULT_MAX_TOKENS, type ToolCall } from '#core/chat.ts';
import { type FailureKind, type UpstreamErrorBody, UpstreamFailure } from '#core/fallback.ts';
import type { ChatStreamEvent } from '#core/upstream.ts';
import type { Usage } from '#core/usage.ts';

/**
 * Pure mapping between the chat-completions wire format (what core hands every chat adapter) and
 * Anthropic's Messages API (`POST /v1/messages`, `anthropic-version: 2023-06-01`): request, response, stream
 * events and error statuses. No I/O here; anthropic-chat.ts does the HTTP.
 *
 * Choices a newcomer would question:
 * - **temperature** is clamped to Anthropic's 0–1, not scaled: both APIs divide logits by it, so 0–1 means
 *   the same on both and the gateway's default 0.7 stays 0.7; OpenAI's hotter 1–2 becomes Anthropic's hottest, 1.
 * - **system** messages, wherever they appear, are hoisted into the top-level `system` (joined by a blank
 *   line): the Messages API has no system role inside the conversation.
 * - **n > 1** cannot be served (Messages returns one reply): the attempt fails as `unsupported`, so routing
 *   moves to a deployment that can; only when none can does the client get a 400 naming `n`. It does not count
 *   against the deployment's health.
 * - **response_format** has no Messages equivalent: `json_object`/`json_schema` become a system instruction.
 * - `seed`, `presence_penalty`, `frequency_penalty` have no equivalent and are dropped.
 * - `thinking` (only ever present from a deployment's `reasoningParams`, since clients cannot send it) is
 *   passed through; Anthropic refuses `temperature`/`top_p` alongside it, so they are then left out.
 */

/** The Anthropic API version this mapping speaks (sent as the `anthropic-version` header). */
export const ANTHROPIC_VERSION = '2023-06-01';

type Json = Record<string, unknown>;

interface TextBlock {
  type: 'text';
  text: string;
}
interface ImageBlock {
  type: 'image';
  source: { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string };
}
interface ToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: Json;
}
interface ToolResultBlock {
  type: 'tool_result';
  tool_use_id: string;
  content: string | TextBlock[];
}
type Block = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock;

export interface MessagesMessage {
  role: 'user' | 'assistant';
  content: Block[];
}

/**
 * A request the Messages API cannot express: another deployment may, so the attempt fails as `unsupported`;
 * the client gets this 400 only when no deployment of the model can serve it.
 */
const unsupported = (message: string, param: string | null): UpstreamFailure =>
  new UpstreamFailure('unsupported', message, {
    upstreamError: { message, type: 'invalid_request_error', code: 'unsupported_parameter', param },
  });

/**
 * A value OpenAI takes but the Messages API cannot (tool arguments that are not an object, an image URL of another
 * scheme, a conversation with no user or assistant turn): `unsupported` too — the answer must not depend on which
 * deployment the route tried first — with the value named for the client should no deployment serve it.
 */
const invalid = (message: string, param: string): UpstreamFailure =>
  new UpstreamFailure('unsupported', message, {
    upstreamError: { message, type: 'invalid_request_error', code: 'invalid_value', param },
  });

// ---------------------------------------------------------------------------------------------------------
// Request

/**
 * The Messages API body for a chat-completions upstream body (core/chat.ts `upstreamChatBody`, with the
 * deployment's upstream model already in `model`). Throws `UpstreamFailure('unsupported')` for what cannot be
 * expressed.
 */
export const toMessagesRequest = (body: Json): Json => {
  const n = body.n;
  if (typeof n === 'number' && n > 1) {
    throw unsupported("This model's provider returns one choice per request; `n` must be 1.", 'n');
  }
  const system: string[] = [];
  const messages: MessagesMessage[] = [];
  const chat = (Array.isArray(body.messages) ? body.messages : []) as ChatMessage[];
  chat.forEach((message, i) => {
    if (message.role === 'system') {
      const text = joinText(message.content);
      if (text !== '') system.push(text);
      return;
    }
    const blocks = toBlocks(message, i);
    if (blocks.length === 0) return;
    const role = message.role === 'assistant' ? 'assistant' : 'user';
    const last = messages.at(-1);
    // Consecutive turns of one role are merged: several `tool` messages must answer their `tool_use`s in a
    // single user turn, and Messages expects turns to alternate.
    if (last?.role === role) mergeBlocks(last.content, blocks);
    else messages.push({ role, content: blocks });
  });
  if (messages.length === 0)
    throw invalid('This model needs at least one user or assistant message with content.', 'messages');
  const formatInstruction = responseFormatInstruction(body.response_format);
  if (formatInstruction !== null) system.push(formatInstruction);

  const out: Json = {
    model: body.model,
    max_tokens: maxTokens(body),
    messages,
  };
  if (system.length > 0) out.system = system.join('\n\n');
  const thinking = body.thinking;
  if (thinking !== undefined) out.thinking = thinkingWithin(thinking, out.max_tokens as number);
  else {
    if (typeof body.temperature === 'number') out.temperature = Math.min(1, Math.max(0, body.temperature));
    if (typeof body.top_p === 'number') out.top_p = body.top_p;
  }
  if (typeof body.stop === 'string') out.stop_sequences = [body.stop];
  else if (Array.isArray(body.stop) && body.stop.length > 0) out.stop_sequences = body.stop;
  const tools = toTools(body.tools);
  if (tools.length > 0) {
    out.tools = tools;
    const choice = toToolChoice(body.tool_choice);
    // With extended thinking Messages takes only `auto` and `none`: a forced tool call cannot be asked of it.
    if (thinking !== undefined && choice !== null && choice.type !== 'auto' && choice.type !== 'none')
      throw unsupported(
        "This model's provider cannot force a tool call while it reasons; use tool_choice 'auto'.",
        'tool_choice',
      );
    if (choice !== null) out.tool_choice = choice;
  }
  if (body.stream === true) out.stream = true;
  return out;
};

/** Appends blocks to a turn, keeping its tool results ahead of everything else, as Messages requires. */
const mergeBlocks = (into: Block[], blocks: readonly Block[]): void => {
  for (const block of blocks) {
    if (block.type !== 'tool_result') into.push(block);
    else {
      const at = into.findIndex((b) => b.type !== 'tool_result');
      into.splice(at === -1 ? into.length : at, 0, block);
    }
  }
};

/** The least thinking budget Messages takes. */
const MIN_THINKING_BUDGET = 1024;

/**
 * The deployment's thinking settings within the call's `max_tokens`: Messages counts thinking inside `max_tokens`,
 * as OpenAI counts reasoning inside `max_completion_tokens`, and refuses a budget that is not below it. A budget
 * above what the client allowed is lowered to fit; a cap too small for any budget cannot be served with thinking.
 */
const thinkingWithin = (thinking: unknown, maxTokens: number): unknown => {
  const settings = thinking as { type?: unknown; budget_tokens?: unknown } | null;
  if (settings?.type !== 'enabled' || typeof settings.budget_tokens !== 'number') return thinking;
  if (settings.budget_tokens < maxTokens) return thinking;
  if (maxTokens <= MIN_THINKING_BUDGET)
    throw unsupported(
      `This model reasons within max_tokens and needs more than ${MIN_THINKING_BUDGET} of them; raise max_tokens.`,
      'max_tokens',
    );
  return { ...settings, budget_tokens: maxTokens - 1 };
};

const maxTokens = (body: Json): number => {
  const value = body.max_tokens ?? body.max_completion_tokens;
  return typeof value === 'number' && Number.isInteger(value) && value > 0 ? value : DEFAULT_MAX_TOKENS;
};

const joinText = (
  content: string | readonly { type: string; text?: string }[] | null | undefined,
): string => {
  if (typeof content === 'string') return content;
  if (!content) return '';
  return content
    .filter((p) => p.type === 'text' && typeof p.text === 'string')
    .map((p) => p.text)
    .join('\n');
};

/** Messages refuses empty text blocks, so they are left out. */
const textBlock = (text: string): TextBlock[] => (text === '' ? [] : [{ type: 'text', text }]);

const toBlocks = (message: Exclude<ChatMessage, { role: 'system' }>, i: number): Block[] => {
  switch (message.role) {
    case 'user':
      if (typeof message.content === 'string') return textBlock(message.content);
      return message.content.flatMap((part, j) => partBlocks(part, `messages[${i}].content[${j}]`));
    case 'assistant': {
      const blocks: Block[] =
        typeof message.content === 'string'
          ? textBlock(message.content)
          : (message.content ?? []).flatMap((part) => textBlock(part.text));
      message.tool_calls?.forEach((call, j) => {
        blocks.push(toolUseBlock(call, `messages[${i}].tool_calls[${j}].function.arguments`));
      });
      return blocks;
    }
    case 'tool':
      return [
        {
          type: 'tool_result',
          tool_use_id: message.tool_call_id,
          content:
            typeof message.content === 'string'
              ? message.content
              : message.content.flatMap((part) => textBlock(part.text)),
        },
      ];
  }
};

const partBlocks = (part: ContentPart, param: string): Block[] => {
  if (part.type === 'text') return textBlock(part.text);
  return [{ type: 'image', source: imageSource(part.image_url.url, param) }];
};

/** A base64 data URL, its scheme and `;base64` in any case (RFC 2397), as our validation takes it. */
const DATA_URL = /^data:([^;,]+);base64,(.*)$/is;

const imageSource = (url: string, param: string): ImageBlock['source'] => {
  const data = DATA_URL.exec(url);
  if (data) return { type: 'base64', media_type: (data[1] as string).toLowerCase(), data: data[2] as string };
  if (/^https?:\/\//i.test(url)) return { type: 'url', url };
  throw invalid('Image URLs must be http(s) URLs or base64 data URLs.', param);
};

const toolUseBlock = (call: ToolCall, param: string): ToolUseBlock => {
  let input: unknown;
  try {
    input = call.function.arguments.trim() === '' ? {} : JSON.parse(call.function.arguments);
  } catch {
    input = undefined;
  }
  // Messages takes tool input as an object; an argument string that is not one cannot be replayed.
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw invalid('Tool call arguments must be a JSON object for this model.', param);
  }
  return { type: 'tool_use', id: call.id, name: call.function.name, input: input as Json };
};

const toTools = (tools: unknown): Json[] => {
  if (!Array.isArray(tools)) return [];
  return tools.flatMap((tool: { type?: unknown; function?: Json }) => {
    const fn = tool?.function;
    if (tool?.type !== 'function' || !fn || typeof fn.name !== 'string') return [];
    return [
      {
        name: fn.name,
        ...(typeof fn.description === 'string' ? { description: fn.description } : {}),
        // Messages requires a schema; OpenAI lets a function without parameters mean "no arguments".
        input_schema: fn.parameters ?? { type: 'object', properties: {} },
      },
    ];
  });
};

const toToolChoice = (choice: unknown): Json | null => {
  if (choice === 'auto') return { type: 'auto' };
  if (choice === 'required') return { type: 'any' };
  if (choice === 'none') return { type: 'none' };
  if (choice && typeof choice === 'object') {
    const name = (choice as { function?: { name?: unknown } }).function?.name;
    if (typeof name === 'string') return { type: 'tool', name };
  }
  return null;
};

const responseFormatInstruction = (format: unknown): string | null => {
  if (!format || typeof format !== 'object') return null;
  const { type, json_schema: schema } = format as { type?: unknown; json_schema?: { schema?: unknown } };
  if (type === 'json_object') return 'Respond with a single valid JSON object and nothing else.';
  if (type === 'json_schema') {
    return `Respond with a single valid JSON object and nothing else, matching this JSON Schema: ${JSON.stringify(
      schema?.schema ?? {},
    )}`;
  }
  return null;
};

// ---------------------------------------------------------------------------------------------------------
// Usage, finish reasons, errors

const count = (value: unknown): number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : 0;

export interface OpenAiUsageObject {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/**
 * Anthropic reports uncached input, cache reads and cache writes separately; chat-completions counts all
 * three as prompt tokens, with the reads as `cached_tokens` (the only part billed at the cached rate).
 * Returns null when the report has no input count, so core falls back to its own estimate.
 */
export const anthropicUsage = (raw: unknown): { object: OpenAiUsageObject; usage: Usage } | null => {
  if (raw === null || typeof raw !== 'object') return null;
  const u = raw as Json;
  if (typeof u.input_tokens !== 'number') return null;
  const cached = count(u.cache_read_input_tokens);
  const prompt = count(u.input_tokens) + cached + count(u.cache_creation_input_tokens);
  const completion = count(u.output_tokens);
  return {
    object: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: cached },
    },
    usage: {
      promptTokens: prompt,
      completionTokens: completion,
      cachedPromptTokens: cached,
      reasoningTokens: 0,
      source: 'upstream',
    },
  };
};

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

/** Messages `stop_reason` → chat-completions `finish_reason`. */
export const finishReason = (stopReason: unknown): FinishReason => {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      // end_turn, stop_sequence, pause_turn (a server tool paused; the turn so far is the reply).
      return 'stop';
  }
};

/**
 * Anthropic says our account is out of credit with a 400 `invalid_request_error` ("Your credit balance is too low to
 * access the Anthropic API…"), not a 402: it is our provider account that cannot pay, like a bad key — another
 * deployment may serve — and the client must not be told our billing state as if its request were at fault.
 */
const OUT_OF_CREDIT = /credit balance is too low/i;

/**
 * Routing's reading of an Anthropic error status (and the `error.type` and message of its body):
 * - 529 `overloaded_error` and 429 `rate_limit_error` → `overloaded`: busy, try another deployment.
 * - 401 `authentication_error`, 403 `permission_error`, 402 `billing_error`, and the 400 that says our account is
 *   out of credit → `auth`: our key or account is at fault, so the deployment's next key is tried.
 * - 500 `api_error` and other 5xx, 404 (wrong model or base URL), 408, 409 → `server_error`.
 * - 400 `invalid_request_error`, 413 `request_too_large`, other 4xx → `rejected`: not retried, a 400 for
 *   the client, as the openai-compatible adapter does.
 */
export const anthropicFailureKind = (
  status: number,
  errorType: string | null,
  message: string | null = null,
): FailureKind => {
  if (status === 529 || errorType === 'overloaded_error' || status === 429) return 'overloaded';
  if (status === 401 || status === 402 || status === 403) return 'auth';
  if (status === 400 && message !== null && OUT_OF_CREDIT.test(message)) return 'auth';
  if (status >= 500 || status === 404 || status === 408 || status === 409) return 'server_error';
  if (status >= 400) return 'rejected';
  return 'protocol';
};

export const anthropicStatusFailure = (
  status: number,
  upstreamError: UpstreamErrorBody | null,
  /** The response's Retry-After, in ms: kept on a busy failure only. */
  retryAfterMs: number | null = null,
): UpstreamFailure => {
  const kind = anthropicFailureKind(status, upstreamError?.type ?? null, upstreamError?.message ?? null);
  return new UpstreamFailure(
    kind,
    `upstream status ${status}${upstreamError?.type ? ` (${upstreamError.type})` : ''}`,
    { status, upstreamError, retryAfterMs: kind === 'overloaded' ? retryAfterMs : null },
  );
};

/** An `error` event inside a stream: overloads stay overloads, anything else is a server error. */
const streamErrorFailure = (event: Json): UpstreamFailure => {
  const error = (event.error ?? {}) as { type?: unknown; message?: unknown };
  const type = typeof error.type === 'string' ? error.type : null;
  return new UpstreamFailure(
    type === 'overloaded_error' ? 'overloaded' : 'server_error',
    `upstream stream error${type ? ` (${type})` : ''}`,
    {
      upstreamError:
        typeof error.message === 'string'
          ? { message: error.message.slice(0, 2000), type, code: null, param: null }
          : null,
    },
  );
};

// ---------------------------------------------------------------------------------------------------------
// Response

export interface Relabel {
  /** The model id the client asked for. */
  readonly publicModel: string;
  /** Unix seconds for `created` (Messages responses carry no timestamp). */
  readonly created: number;
}

/** A Messages response → a chat.completion object and its usage. */
export const fromMessagesResponse = (
  message: Json,
  relabel: Relabel,
): { body: Json; usage: Usage | null } => {
  if (message.type !== 'message' || !Array.isArray(message.content)) {
    throw new UpstreamFailure('protocol', 'upstream body is not a Messages response');
  }
  let text: string | null = null;
  const toolCalls: ToolCall[] = [];
  for (const block of message.content as Json[]) {
    if (block?.type === 'text' && typeof block.text === 'string') text = (text ?? '') + block.text;
    else if (block?.type === 'tool_use') {
      toolCalls.push({
        id: String(block.id),
        type: 'function',
        function: { name: String(block.name), arguments: JSON.stringify(block.input ?? {}) },
      });
    }
    // thinking / redacted_thinking blocks are not part of a chat-completions reply.
  }
  const usage = anthropicUsage(message.usage);
  return {
    body: {
      id: typeof message.id === 'string' ? message.id : 'msg',
      object: 'chat.completion',
      created: relabel.created,
      model: relabel.publicModel,
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: text,
            refusal: null,
            ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
          },
          logprobs: null,
          finish_reason: finishReason(message.stop_reason),
        },
      ],
      ...(usage ? { usage: usage.object } : {}),
    },
    usage: usage?.usage ?? null,
  };
};

// ---------------------------------------------------------------------------------------------------------
// Stream

export interface StreamOptions extends Relabel {
  /** Whether the client asked for usage: chunks then carry `"usage":null` as OpenAI's do. */
  readonly clientWantsUsage: boolean;
}

/**
 * Turns Messages stream events (the `data` of each SSE event; their `type` field names them) into
 * chat.completion.chunk events, one upstream event at a time:
 *
 * - `message_start` → the role chunk (so the first byte goes out as soon as Anthropic's does);
 * - `content_block_start` of a `tool_use` → a tool-call chunk with id and name; text deltas → content chunks;
 *   `input_json_delta` → tool-call argument chunks (indexed by tool call, not by content block);
 * - `message_delta` → the finish_reason chunk; `message_stop` → the usage-only chunk, and the end;
 * - `content_block_stop` of a tool call that streamed no arguments → its arguments `{}`;
 * - `ping`, other `content_block_stop`s, thinking deltas → nothing; `error` → thrown `UpstreamFailure`.
 *
 * Usage is the merge of `message_start`'s (input side) and `message_delta`'s (cumulative counts).
 */
export class MessagesStreamTranslator {
  readonly #options: StreamOptions;
  #head = '';
  #tail: string;
  /** Content block index → tool call index. */
  readonly #toolIndex = new Map<number, number>();
  #usage: Json = {};
  /** `message_delta` has arrived: the reply is whole (its stop reason and final counts are in). */
  #replied = false;
  #finished = false;
  /** Tool calls (by OpenAI index) whose arguments have been sent. */
  readonly #toolsWithArguments = new Set<number>();

  constructor(options: StreamOptions) {
    this.#options = options;
    this.#tail = options.clientWantsUsage ? '],"usage":null}' : ']}';
    this.#setHead('msg');
  }

  /** True once `message_stop` has arrived: the stream is complete. */
  get finished(): boolean {
    return this.#finished;
  }

  /**
   * True once `message_delta` has arrived: the client has the whole reply, and the counts it is billed on. An
   * upstream that drops the connection before `message_stop` then takes nothing from it (`stop` ends the stream).
   */
  get replied(): boolean {
    return this.#replied;
  }

  /** The end of the stream, as `message_stop` gives it: the usage-only chunk (when usage came), and finished. */
  stop(): ChatStreamEvent[] {
    this.#finished = true;
    const usage = anthropicUsage(this.#usage);
    if (usage === null) return [];
    return [
      {
        data: `${this.#head}],"usage":${JSON.stringify(usage.object)}}`,
        usage: usage.usage,
        usageOnly: true,
        output: [],
      },
    ];
  }

  /** The chat events for one upstream event's data (often none). */
  translate(data: string): ChatStreamEvent[] {
    let event: Json;
    try {
      event = JSON.parse(data) as Json;
    } catch (error) {
      throw new UpstreamFailure('protocol', 'upstream stream event is not JSON', { cause: error });
    }
    switch (event.type) {
      case 'message_start': {
        const message = (event.message ?? {}) as Json;
        if (typeof message.id === 'string') this.#setHead(message.id);
        this.#mergeUsage(message.usage);
        return [this.#chunk('{"role":"assistant","content":""}')];
      }
      case 'content_block_start': {
        const block = (event.content_block ?? {}) as Json;
        if (block.type === 'text' && typeof block.text === 'string' && block.text !== '') {
          const text = JSON.stringify(block.text);
          return [this.#chunk(`{"content":${text}}`, null, [text.slice(1, -1)])];
        }
        if (block.type !== 'tool_use') return [];
        const index = this.#toolIndex.size;
        this.#toolIndex.set(Number(event.index), index);
        const call = { index, id: block.id, type: 'function', function: { name: block.name, arguments: '' } };
        const name = typeof block.name === 'string' ? [JSON.stringify(block.name).slice(1, -1)] : [];
        return [this.#chunk(`{"tool_calls":[${JSON.stringify(call)}]}`, null, name)];
      }
      case 'content_block_delta': {
        const delta = (event.delta ?? {}) as Json;
        if (delta.type === 'text_delta' && typeof delta.text === 'string') {
          const text = JSON.stringify(delta.text);
          return [this.#chunk(`{"content":${text}}`, null, [text.slice(1, -1)])];
        }
        if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string') {
          const index = this.#toolIndex.get(Number(event.index));
          if (index === undefined || delta.partial_json === '') return [];
          this.#toolsWithArguments.add(index);
          const piece = JSON.stringify(delta.partial_json);
          return [
            this.#chunk(`{"tool_calls":[{"index":${index},"function":{"arguments":${piece}}}]}`, null, [
              piece.slice(1, -1),
            ]),
          ];
        }
        return [];
      }
      case 'message_delta': {
        this.#mergeUsage(event.usage);
        this.#replied = true;
        const delta = (event.delta ?? {}) as Json;
        return [this.#chunk('{}', finishReason(delta.stop_reason))];
      }
      case 'message_stop':
        return this.stop();
      case 'content_block_stop': {
        // A tool called with no arguments streams no input_json_delta at all, leaving its arguments "" — which
        // `JSON.parse` (the openai SDK's finalChatCompletion) refuses. OpenAI sends "{}", as the non-stream
        // translation does.
        const index = this.#toolIndex.get(Number(event.index));
        if (index === undefined || this.#toolsWithArguments.has(index)) return [];
        this.#toolsWithArguments.add(index);
        return [this.#chunk(`{"tool_calls":[{"index":${index},"function":{"arguments":"{}"}}]}`)];
      }
      case 'error':
        throw streamErrorFailure(event);
      default:
        // ping and event types added to the API later.
        return [];
    }
  }

  #setHead(id: string): void {
    const { created, publicModel } = this.#options;
    this.#head =
      `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},` +
      `"model":${JSON.stringify(publicModel)},"choices":[`;
  }

  #mergeUsage(raw: unknown): void {
    if (raw === null || typeof raw !== 'object') return;
    for (const [key, value] of Object.entries(raw)) {
      if (typeof value === 'number') this.#usage[key] = value;
    }
  }

  /** A chat chunk of choice 0; `output`: the completion output it carries (ChatStreamEvent.output). */
  #chunk(delta: string, finish: FinishReason | null = null, output: readonly string[] = []): ChatStreamEvent {
    return {
      data: `${this.#head}{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${
        finish === null ? 'null' : `"${finish}"`
      }}${this.#tail}`,
      usage: null,
      usageOnly: false,
      output,
    };
  }
}
