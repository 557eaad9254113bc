import { createHash } from 'node:crypto';
import {
  type ChatMessage,
  type ContentPart,
  DEFAULT_MAX_TOKENS,
  type ToolCall,
  temperatureIsDefault,
} from '#core/chat.ts';
import { BUSY, type FailureKind, type UpstreamErrorBody, UpstreamFailure } from '#core/fallback.ts';
import type { ChatStreamEvent } from '#core/upstream.ts';
import type { Usage } from '#core/usage.ts';
import { REQUEST_TOO_LARGE } from './http.ts';

/**
 * Pure mapping between the chat-completions wire format (what core hands every chat adapter) and
 * Anthropic's Messages API (`POST /v1/messages`, `anthropic-version: 2023-06-01`): request, response, stream
 * events and error statuses. No I/O here; anthropic-chat.ts does the HTTP.
 *
 * Choices a newcomer would question:
 * - **temperature** is clamped to Anthropic's 0–1, not scaled: both APIs divide logits by it, so 0–1 means
 *   the same on both and the gateway's default 0.7 stays 0.7; OpenAI's hotter 1–2 becomes Anthropic's hottest, 1.
 * - **temperature and top_p**: Claude 4.5-era models refuse the pair, so a client's `top_p` goes alone (the
 *   default temperature core filled in is left out) and a `top_p` of 1 is left out (a no-op); a client's own pair
 *   goes as sent (a deployment whose model refuses it takes `omitParams: ["top_p"]`).
 * - **system** messages, wherever they appear, are hoisted into the top-level `system` (joined by a blank
 *   line): the Messages API has no system role inside the conversation.
 * - **n > 1** cannot be served (Messages returns one reply): the attempt fails as `unsupported`, so routing
 *   moves to a deployment that can; only when none can does the client get a 400 naming `n`. It does not count
 *   against the deployment's health.
 * - **response_format** has no Messages equivalent: `json_object`/`json_schema` become a system instruction.
 * - `seed`, `presence_penalty`, `frequency_penalty` have no equivalent and are dropped.
 * - `thinking` (only ever present from a deployment's `reasoningParams`, since clients cannot send it) is
 *   passed through; Anthropic refuses `temperature`/`top_p` alongside it, so they are then left out. It is left
 *   out itself (and the rules it brings: the budget within `max_tokens`, no forced tool call, no sampling knobs)
 *   when the conversation ends on tool results or on an assistant message: Messages then wants the turn's own
 *   thinking blocks replayed, which chat-completions history cannot carry. Thinking the model shows is relayed as
 *   `reasoning_content`, as OpenAI-compatible upstreams' reasoning is, and so counted when usage is estimated.
 * - What Messages refuses that OpenAI takes: a stop sequence without a non-whitespace character fails the attempt
 *   as `unsupported` (dropped, it would change where the reply ends); whitespace-only text blocks are left out
 *   (they carry nothing) and a final assistant message (a prefill) loses its trailing whitespace; tool call ids
 *   outside `[a-zA-Z0-9_-]` are mapped (toolUseId); an image data URL is sent as the type its bytes are (JPEG, PNG,
 *   GIF or WebP — any other is `unsupported`), whatever it declared; a tool schema without `type` gets `"object"`.
 * - A prompt beyond the deployment's window, a request over its size limit (413) or an image over its limits are
 *   the deployment's limits, not the request's fault: `unsupported`, so one with larger limits may serve it.
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
  content?: string | TextBlock[];
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
  const ids = new ToolUseIds();
  chat.forEach((message, i) => {
    if (message.role === 'system') {
      const text = joinText(message.content);
      // Whitespace alone carries nothing, and Messages refuses it as text.
      if (NON_WHITESPACE.test(text)) system.push(text);
      return;
    }
    const blocks = toBlocks(message, i, ids);
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
  trimFinalAssistant(messages);
  const formatInstruction = responseFormatInstruction(body.response_format);
  if (formatInstruction !== null) system.push(formatInstruction);

  const out: Json = {
    model: body.model,
    max_tokens: maxTokens(body),
    messages,
  };
  if (system.length > 0) out.system = system.join('\n\n');
  const thinking = continuesTurn(messages) ? undefined : body.thinking;
  if (thinking !== undefined) out.thinking = thinkingWithin(thinking, out.max_tokens as number);
  else Object.assign(out, sampling(body));
  const stop = stopSequences(body.stop);
  if (stop.length > 0) out.stop_sequences = stop;
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
  } else {
    // A history of tool calls with no tools offered now (an agent's last "answer, no more tools" turn, a summary
    // of a transcript) is valid to OpenAI; Messages refuses tool_use and tool_result blocks without tool
    // definitions (400). The tools the history used are declared, and none may be called: OpenAI's meaning.
    const used = historyToolNames(messages);
    if (used.length > 0) {
      out.tools = used.map((name) => ({ name, input_schema: { type: 'object', properties: {} } }));
      out.tool_choice = { type: 'none' };
    }
  }
  if (body.stream === true) out.stream = true;
  return out;
};

/** The names of the tools a conversation's assistant turns called, each once, in order. */
const historyToolNames = (messages: readonly MessagesMessage[]): string[] => {
  const names = new Set<string>();
  for (const message of messages)
    for (const block of message.content) if (block.type === 'tool_use') names.add(block.name);
  return [...names];
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

/**
 * Whether the reply continues a turn under way: the conversation ends on tool results (a tool loop) or on an
 * assistant message (a prefill). With thinking on, Messages wants that assistant turn to open with the thinking
 * blocks it produced (400 "Expected `thinking` or `redacted_thinking`, but found `tool_use`"), signed by Anthropic
 * — and chat-completions history cannot carry them. Such a request goes without thinking: every tool loop with
 * thinking would fail otherwise, and the model reasoned at the start of the turn already.
 */
const continuesTurn = (messages: readonly MessagesMessage[]): boolean => {
  const last = messages.at(-1);
  return last?.role === 'assistant' || (last?.content.some((b) => b.type === 'tool_result') ?? false);
};

/**
 * `temperature` (clamped to 0–1) and `top_p`, but not ours beside the client's: Claude 4.5-era models refuse the
 * pair (400 "`temperature` and `top_p` cannot both be specified for this model"), and core puts its default
 * temperature in every body — so a client's `top_p` goes alone unless the temperature is the client's too, and a
 * `top_p` of 1 (LangChain's default: no truncation at all) is left out as the no-op it is. A client's own pair goes
 * as sent: older Claude models take it, and a deployment of a model that does not is configured with
 * `omitParams: ["top_p"]` (docs/registry.md).
 */
const sampling = (body: Json): Json => {
  const temperature =
    typeof body.temperature === 'number' ? Math.min(1, Math.max(0, body.temperature)) : undefined;
  const topP = typeof body.top_p === 'number' && body.top_p < 1 ? body.top_p : undefined;
  if (topP === undefined) return temperature === undefined ? {} : { temperature };
  if (temperature === undefined || temperatureIsDefault(body)) return { top_p: topP };
  return { temperature, top_p: topP };
};

/**
 * The stop sequences. Messages refuses one that is empty or only whitespace (400 "each stop sequence must contain
 * non-whitespace"); dropping it would change where the reply ends, so the attempt is `unsupported` instead.
 */
const stopSequences = (stop: unknown): unknown[] => {
  const sequences = typeof stop === 'string' ? [stop] : Array.isArray(stop) ? stop : [];
  if (sequences.some((s) => typeof s !== 'string' || !NON_WHITESPACE.test(s)))
    throw invalid("Stop sequences must contain a non-whitespace character on this model's provider.", 'stop');
  return sequences;
};

const NON_WHITESPACE = /\S/;

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

/**
 * Messages refuses empty and whitespace-only text blocks ("text content blocks must contain non-whitespace text"),
 * so they are left out: they carry nothing. A turn left with no block is left out whole, and the turns around it
 * merge (toMessagesRequest).
 */
const textBlock = (text: string): TextBlock[] => (NON_WHITESPACE.test(text) ? [{ type: 'text', text }] : []);

/**
 * Messages refuses a final assistant turn (a prefill) whose content ends in whitespace ("final assistant content
 * cannot end with trailing whitespace"): its last text block loses it. Whitespace-only blocks are gone already, so
 * some text stays.
 */
const trimFinalAssistant = (messages: MessagesMessage[]): void => {
  const last = messages.at(-1);
  const block = last?.content.at(-1);
  if (last?.role !== 'assistant' || block?.type !== 'text') return;
  last.content[last.content.length - 1] = { type: 'text', text: block.text.trimEnd() };
};

const toBlocks = (message: Exclude<ChatMessage, { role: 'system' }>, i: number, ids: ToolUseIds): Block[] => {
  switch (message.role) {
    case 'user':
      if (typeof message.content === 'string') return textBlock(message.content);
      return message.content.flatMap((part, j) => partBlocks(part, `messages[${i}].content[${j}]`));
    case 'assistant': {
      ids.nextTurn(i);
      const blocks: Block[] =
        typeof message.content === 'string'
          ? textBlock(message.content)
          : (message.content ?? []).flatMap((part) => textBlock(part.text));
      message.tool_calls?.forEach((call, j) => {
        blocks.push(
          toolUseBlock(call, ids.use(call.id), `messages[${i}].tool_calls[${j}].function.arguments`),
        );
      });
      return blocks;
    }
    case 'tool': {
      // A tool with no output (a silent command) sends none: Messages refuses empty or whitespace-only text.
      const content =
        typeof message.content === 'string'
          ? NON_WHITESPACE.test(message.content)
            ? message.content
            : []
          : message.content.flatMap((part) => textBlock(part.text));
      return [
        {
          type: 'tool_result',
          tool_use_id: ids.result(message.tool_call_id),
          ...(content.length > 0 ? { content } : {}),
        },
      ];
    }
  }
};

const partBlocks = (part: ContentPart, param: string): Block[] => {
  if (part.type === 'text') return textBlock(part.text);
  return [{ type: 'image', source: imageSource(part.image_url.url, param) }];
};

/** A base64 data URL, its scheme and `;base64` in any case (RFC 2397), as our validation takes it. */
const DATA_URL = /^data:[^;,]+;base64,(.*)$/is;

/**
 * Messages takes JPEG, PNG, GIF and WebP images only, and refuses one whose bytes are not of the type it declares.
 * Clients declare loosely (`image/jpg`, `image/pjpeg`, or a wrong type), so the type the bytes' signature says is
 * sent, whatever was declared; bytes of any other format cannot be sent. URL images are Anthropic's to fetch.
 */
const imageSource = (url: string, param: string): ImageBlock['source'] => {
  const data = DATA_URL.exec(url);
  if (data) {
    const base64 = data[1] as string;
    const mediaType = imageType(leadingBytes(base64));
    if (mediaType === null)
      throw invalid(
        `The image at ${param} is not a JPEG, PNG, GIF or WebP image, the formats this model's provider takes.`,
        param,
      );
    return { type: 'base64', media_type: mediaType, data: base64 };
  }
  if (/^https?:\/\//i.test(url)) return { type: 'url', url };
  throw invalid('Image URLs must be http(s) URLs or base64 data URLs.', param);
};

/** The first bytes of base64 data (18: enough for every signature), without decoding all of it. */
const leadingBytes = (base64: string): Buffer => {
  let head = base64.slice(0, 24);
  // Whitespace inside base64 is legal in a data URL and decodes to nothing: only then is the whole string read.
  if (/\s/.test(head)) head = base64.replace(/\s+/g, '').slice(0, 24);
  return Buffer.from(head, 'base64');
};

/** The type Messages takes that `bytes` begin as (JPEG FF D8 FF, PNG 89 'PNG', 'GIF8', 'RIFF'…'WEBP'), or null. */
const imageType = (bytes: Buffer): string | null => {
  const head = bytes.toString('latin1', 0, 12);
  if (head.startsWith('\xff\xd8\xff')) return 'image/jpeg';
  if (head.startsWith('\x89PNG')) return 'image/png';
  if (head.startsWith('GIF8')) return 'image/gif';
  if (head.startsWith('RIFF') && head.slice(8, 12) === 'WEBP') return 'image/webp';
  return null;
};

const toolUseBlock = (call: ToolCall, id: string, param: string): ToolUseBlock => {
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
  return { type: 'tool_use', id, name: call.function.name, input: input as Json };
};

const TOOL_USE_ID = /^[a-zA-Z0-9_-]+$/;
/** Longest tool call id sent: ids are opaque to the model, and Anthropic's own are about 30 characters. */
const MAX_TOOL_USE_ID = 64;

/**
 * A tool call id as Messages takes it (`^[a-zA-Z0-9_-]+$`); other providers' ids (`functions.get_weather:0`,
 * `call:1`) are refused. An id that fits goes as it is; any other has each character outside the set replaced by `_`,
 * is cut to fit, and ends with a hash of the original: the same id maps alike in a call and its result and on every
 * turn, and two ids that differ only in replaced characters stay apart. Only Anthropic sees these ids (replies
 * carry its own).
 */
const toolUseId = (id: string): string => {
  if (id.length <= MAX_TOOL_USE_ID && TOOL_USE_ID.test(id)) return id;
  const hash = createHash('sha256').update(id).digest('hex').slice(0, 16);
  return `${id.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, MAX_TOOL_USE_ID - hash.length - 1)}_${hash}`;
};

/**
 * The tool call ids of one conversation as sent (toolUseId), unique across it: Messages refuses a conversation that
 * repeats a `tool_use` id (400 "tool_use ids must be unique"), where OpenAI takes one reused on a later turn — as
 * clients and other providers number calls per turn (`call_0`). A repeat is sent as another id, derived from the
 * turn it is on, and the results after that turn answer it.
 */
class ToolUseIds {
  readonly #sent = new Set<string>();
  /** This turn's ids (as the client wrote them) → as sent. */
  readonly #turn = new Map<string, string>();
  #at = -1;

  /** An assistant turn at `messages[i]` begins: the results after it answer its calls. */
  nextTurn(i: number): void {
    this.#at = i;
    this.#turn.clear();
  }

  use(id: string): string {
    let sent = toolUseId(id);
    if (this.#sent.has(sent)) sent = toolUseId(`${id}~turn${this.#at}`);
    this.#sent.add(sent);
    this.#turn.set(id, sent);
    return sent;
  }

  result(id: string): string {
    return this.#turn.get(id) ?? toolUseId(id);
  }
}

const toTools = (tools: unknown): Json[] => {
  if (!Array.isArray(tools)) return [];
  return tools.flatMap((tool: { type?: unknown; function?: Json }) => {
    const fn = tool?.function;
    if (tool?.type !== 'function' || !fn || typeof fn.name !== 'string') return [];
    return [
      {
        name: fn.name,
        ...(typeof fn.description === 'string' ? { description: fn.description } : {}),
        input_schema: inputSchema(fn.parameters),
      },
    ];
  });
};

/**
 * Messages requires an object schema that says `type: "object"`; OpenAI lets a function without parameters (or with
 * `{}`) mean "no arguments", and takes a schema that leaves its type out.
 */
const inputSchema = (parameters: unknown): unknown => {
  if (parameters === undefined || parameters === null) return { type: 'object', properties: {} };
  if (typeof parameters !== 'object' || Array.isArray(parameters) || 'type' in parameters) return parameters;
  return { type: 'object', properties: {}, ...parameters };
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
 * - 529 `overloaded_error` → `overloaded`: busy, try another deployment.
 * - 429 `rate_limit_error` → `rate_limited`: our key's rate limit, which the deployment's next key may not share.
 * - 401 `authentication_error`, 403 `permission_error`, 402 `billing_error`, and the 400 that says our account is
 *   out of credit → `auth`: our key or account is at fault, so the deployment's next key is tried.
 * - 500 `api_error` and other 5xx, 404 (wrong model or base URL), 408, 409 → `server_error`.
 * - 413 `request_too_large`, and the 400s of a prompt beyond the context window or an image over the size limits →
 *   `unsupported` (deploymentLimit): this deployment's limits, another may take the request.
 * - 400 `invalid_request_error`, other 4xx → `rejected`: not retried, a 400 for the client, as the
 *   openai-compatible adapter does.
 */
export const anthropicFailureKind = (
  status: number,
  errorType: string | null,
  message: string | null = null,
): FailureKind => {
  if (status === 529 || errorType === 'overloaded_error') return 'overloaded';
  // Our organisation's rate limit (`rate_limit_error`): the key's quota, which the deployment's next key may not share.
  if (status === 429) return 'rate_limited';
  if (status === 401 || status === 402 || status === 403) return 'auth';
  if (status === 400 && message !== null && OUT_OF_CREDIT.test(message)) return 'auth';
  if (status >= 500 || status === 404 || status === 408 || status === 409) return 'server_error';
  if (deploymentLimit(status, message) !== null) return 'unsupported';
  if (status >= 400) return 'rejected';
  return 'protocol';
};

/** Anthropic's words for a prompt beyond the context window: "prompt is too long: 208342 tokens > 200000 maximum". */
const PROMPT_TOO_LONG = /^prompt is too long\b(?::\s*(\d+) tokens\s*>\s*(\d+) maximum)?/i;

/**
 * …and, from older models, for a prompt whose completion cap does not fit beside it: "input length and `max_tokens`
 * exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again".
 */
const INPUT_AND_CAP_TOO_LONG =
  /^input length and `?max_tokens`? exceed context limit\b(?::\s*(\d+)\s*\+\s*(\d+)\s*>\s*(\d+))?/i;

/**
 * …for an image over its size limits: "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum: …",
 * "….image.source.base64.data: At least one of the image dimensions exceed max allowed size: 8000 pixels".
 */
const IMAGE_TOO_LARGE =
  /^messages\.\d+\.content\.\d+\.image\.source\.base64(?:\.data)?:\s*(?:image exceeds|at least one of the image dimensions exceed)/i;

/** …when every deployment found an image too large (Anthropic's text indexes its own messages, not the client's). */
const IMAGE_TOO_LARGE_ERROR: UpstreamErrorBody = {
  message:
    "An image is larger than this model's providers accept (in bytes or pixels). Send a smaller image.",
  type: 'invalid_request_error',
  code: 'invalid_value',
  param: 'messages',
};

/**
 * …for a conversation that ends on an assistant turn (a prefill), which Claude models from 4.6 on refuse: "This model
 * does not support assistant message prefill. The conversation must end with a user message."
 */
const NO_PREFILL = /^This model does not support assistant message prefill\b/i;

/** …when no deployment takes a prefill: OpenAI's own models answer such a conversation. */
const NO_PREFILL_ERROR: UpstreamErrorBody = {
  message:
    "This model's providers do not continue an assistant message: the conversation must end with a user message.",
  type: 'invalid_request_error',
  code: 'invalid_value',
  param: 'messages',
};

/**
 * An Anthropic error that is this deployment's limit, not the request's fault — a prompt beyond its context window,
 * a request over its size limit (413), an image over its limits, a prefill its model refuses: another deployment (a
 * larger window, another model) may serve the request, so it is `unsupported`. Returns what the client is told
 * should none serve it: for a prompt too long, OpenAI's `context_length_exceeded` in OpenAI's words (what an
 * OpenAI-compatible deployment passes on). Only
 * Anthropic's own words are matched, from the start of its message: a message that quotes the request further on
 * must not turn the request's fault into the deployment's.
 */
const deploymentLimit = (status: number, message: string | null): UpstreamErrorBody | null => {
  if (status === 413) return REQUEST_TOO_LARGE;
  if (status !== 400 || message === null) return null;
  const tooLong = PROMPT_TOO_LONG.exec(message);
  if (tooLong) {
    const [, tokens, maximum] = tooLong;
    return {
      message:
        tokens !== undefined && maximum !== undefined
          ? `This model's maximum context length is ${maximum} tokens. However, your messages resulted in ${tokens} tokens. Please reduce the length of the messages.`
          : "The messages are longer than this model's maximum context length. Please reduce the length of the messages.",
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
      param: 'messages',
    };
  }
  const withCap = INPUT_AND_CAP_TOO_LONG.exec(message);
  if (withCap) {
    const [, input, cap, maximum] = withCap;
    return {
      message:
        input !== undefined && cap !== undefined && maximum !== undefined
          ? `This model's maximum context length is ${maximum} tokens. However, you requested ${Number(input) + Number(cap)} tokens (${input} in the messages, ${cap} in the completion). Please reduce the length of the messages or completion.`
          : "The messages and the completion's max_tokens are longer than this model's maximum context length. Please reduce the length of the messages or completion.",
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
      param: 'messages',
    };
  }
  if (NO_PREFILL.test(message)) return NO_PREFILL_ERROR;
  return IMAGE_TOO_LARGE.test(message) ? IMAGE_TOO_LARGE_ERROR : null;
};

export const anthropicStatusFailure = (
  status: number,
  upstreamError: UpstreamErrorBody | null,
  /** The response's Retry-After, in ms: kept on a busy failure only (overloaded, or our key's rate limit). */
  retryAfterMs: number | null = null,
): UpstreamFailure => {
  const kind = anthropicFailureKind(status, upstreamError?.type ?? null, upstreamError?.message ?? null);
  const limit = kind === 'unsupported' ? deploymentLimit(status, upstreamError?.message ?? null) : null;
  return new UpstreamFailure(
    kind,
    `upstream status ${status}${upstreamError?.type ? ` (${upstreamError.type})` : ''}${limit ? ` (${limit.code})` : ''}`,
    {
      status,
      upstreamError: limit ?? upstreamError,
      retryAfterMs: BUSY.has(kind) ? retryAfterMs : null,
    },
  );
};

/**
 * An `error` event inside a stream: overloads stay overloads, a rate limit our key's (as their statuses read), anything
 * else is a server error.
 */
const streamErrorFailure = (event: Json): UpstreamFailure => {
  const error = (event.error ?? {}) as { type?: unknown; message?: unknown };
  const type = typeof error.type === 'string' ? error.type : null;
  return new UpstreamFailure(
    type === 'overloaded_error'
      ? 'overloaded'
      : type === 'rate_limit_error'
        ? 'rate_limited'
        : 'server_error',
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
  let reasoning: string | null = null;
  const toolCalls: ToolCall[] = [];
  for (const block of message.content as Json[]) {
    if (block?.type === 'text' && typeof block.text === 'string') text = (text ?? '') + block.text;
    else if (block?.type === 'thinking' && typeof block.thinking === 'string')
      reasoning = (reasoning ?? '') + block.thinking;
    else if (block?.type === 'tool_use') {
      toolCalls.push({
        id: String(block.id),
        type: 'function',
        function: { name: String(block.name), arguments: JSON.stringify(block.input ?? {}) },
      });
    }
    // redacted_thinking blocks are encrypted: nothing to show.
  }
  // A whole reply's report without its output count is malformed, not a reply of no tokens: core then counts the
  // reply itself (ADR 0002), as it does an OpenAI report without completion_tokens.
  const reported = message.usage as Json | null | undefined;
  const usage = typeof reported?.output_tokens === 'number' ? anthropicUsage(reported) : null;
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
            // Shown thinking, as OpenAI-compatible upstreams show reasoning (and as it is streamed).
            ...(reasoning ? { reasoning_content: reasoning } : {}),
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

/** Events that carry (or begin) the reply: the first of them opens the client's stream with the role chunk. */
const OPENING_EVENTS: ReadonlySet<unknown> = new Set([
  'content_block_start',
  'content_block_delta',
  'message_delta',
  'message_stop',
]);

/**
 * Turns Messages stream events (the `data` of each SSE event; their `type` field names them) into
 * chat.completion.chunk events, one upstream event at a time:
 *
 * - `message_start` → nothing yet: the role chunk goes out with the first content event (a `content_block_start`,
 *   a delta, `message_delta`), so an `error` event before any content (Anthropic reports overloads in-stream, after
 *   `message_start`) fails the attempt before the first byte and routing falls back;
 * - `content_block_start` of a `tool_use` → a tool-call chunk with id and name; text deltas → content chunks;
 *   thinking deltas → `reasoning_content` chunks (shown reasoning, as OpenAI-compatible upstreams send it: relayed,
 *   and counted if the stream is billed on our estimate); `input_json_delta` → tool-call argument chunks (indexed
 *   by tool call, not by content block);
 * - `message_delta` → the finish_reason chunk; `message_stop` → the usage-only chunk, and the end;
 * - `content_block_stop` of a tool call that streamed no arguments → its arguments `{}`;
 * - `ping`, other `content_block_stop`s, signature deltas → nothing; `error` → thrown `UpstreamFailure`.
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
  /**
   * `message_delta` brought the output count: until it does, the only one is message_start's placeholder (1), and the
   * stream is billed on our count of what it relayed instead.
   */
  #outputCounted = false;
  /** The role chunk has gone out (with the first content event). */
  #opened = false;
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

  /** The input side of the usage reported so far (`message_start`'s), as counted for billing; null before it. */
  get promptUsage(): Pick<Usage, 'promptTokens' | 'cachedPromptTokens'> | null {
    return anthropicUsage(this.#usage)?.usage ?? null;
  }

  /** The end of the stream, as `message_stop` gives it: the usage-only chunk (when usage came), and finished. */
  stop(): ChatStreamEvent[] {
    this.#finished = true;
    const usage = this.#outputCounted ? anthropicUsage(this.#usage) : null;
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
    const events = this.#translate(event);
    if (this.#opened || !OPENING_EVENTS.has(event.type)) return events;
    // The first content: the deployment is committed now, not at message_start (see the class comment). Any content
    // block opens it, a thinking one too: its thinking may take long, and the first-byte timeout must not cut it.
    this.#opened = true;
    return [this.#chunk('{"role":"assistant","content":""}'), ...events];
  }

  #translate(event: Json): ChatStreamEvent[] {
    switch (event.type) {
      case 'message_start': {
        const message = (event.message ?? {}) as Json;
        if (typeof message.id === 'string') this.#setHead(message.id);
        this.#mergeUsage(message.usage);
        return [];
      }
      case 'content_block_start': {
        const block = (event.content_block ?? {}) as Json;
        if (block.type === 'text' && typeof block.text === 'string' && block.text !== '') {
          const text = JSON.stringify(block.text);
          return [this.#chunk(`{"content":${text}}`, null, [text.slice(1, -1)])];
        }
        if (block.type === 'thinking' && typeof block.thinking === 'string' && block.thinking !== '')
          return [this.#reasoning(block.thinking)];
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
        if (delta.type === 'thinking_delta' && typeof delta.thinking === 'string' && delta.thinking !== '')
          return [this.#reasoning(delta.thinking)];
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
        if (typeof (event.usage as Json | undefined)?.output_tokens === 'number') this.#outputCounted = true;
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

  /** A `reasoning_content` chunk of shown thinking, its text the output it carries. */
  #reasoning(thinking: string): ChatStreamEvent {
    const text = JSON.stringify(thinking);
    return this.#chunk(`{"reasoning_content":${text}}`, null, [text.slice(1, -1)]);
  }

  #setHead(id: string): void {
    const { created, publicModel } = this.#options;
    this.#head =
      `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},` +
      `"model":${JSON.stringify(publicModel)},"choices":[`;
  }

  /**
   * The counts are cumulative (message_delta's restate message_start's): a smaller one — a proxy's 0 for a count it
   * does not repeat — never replaces a larger.
   */
  #mergeUsage(raw: unknown): void {
    if (raw === null || typeof raw !== 'object') return;
    for (const [key, value] of Object.entries(raw)) {
      if (typeof value === 'number') this.#usage[key] = Math.max(value, count(this.#usage[key]));
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
