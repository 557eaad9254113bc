/**
 * `POST /v1/messages`: deterministic replies in Anthropic's Messages API wire format, streamed (named SSE
 * events, `message_start` … `message_stop`) or not, with Anthropic's authentication (`x-api-key` plus
 * `anthropic-version`), error bodies (`{"type":"error","error":{"type","message"}}`) and usage
 * (`input_tokens` excludes cache reads and writes, reported apart).
 *
 * Text and tokens come from the same helpers as the chat endpoint, so a reply is as predictable: vocabulary
 * words that are one token each, `max_tokens` truncating cleanly, `[[sim: …]]` directives in any text.
 * The simulator is an upstream, not a validator: only `model`, `max_tokens` and `messages` are required.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { ApiCall, ApiDialect, ApiEndpoint, ApiRejection } from '#sim/api.ts';
import { TOOL_CALL_COMPLETION_TOKENS } from '#sim/chat.ts';
import {
  DIRECTIVE_MARKER,
  type FaultPlan,
  FaultSyntaxError,
  mergeDirectives,
  parseInlineDirectives,
  type RequestDirectives,
} from '#sim/faults.ts';
import { type Exchange, parseJson, sendJson, sendTruncatedJson } from '#sim/http.ts';
import { cachedTokensFor, PromptCache } from '#sim/prompt-cache.ts';
import { sendFramedEvents } from '#sim/sse.ts';
import { fnv1a, generateWords, mulberry32, naturalWordCount } from '#sim/text.ts';
import { countTextTokens, REPLY_PRIMING_TOKENS, TOKENS_PER_IMAGE, TOKENS_PER_MESSAGE } from '#sim/tokens.ts';

/** An Anthropic error response body. */
export interface AnthropicErrorBody {
  type: 'error';
  error: { type: string; message: string };
}

/** An Anthropic error body of the given `error.type`. */
export function anthropicError(type: string, message: string): AnthropicErrorBody {
  return Object.freeze({ type: 'error', error: Object.freeze({ type, message }) });
}

/** HTTP 529 body of the `overloaded` fault, as Anthropic sends it. */
export const ANTHROPIC_OVERLOADED_ERROR = anthropicError('overloaded_error', 'Overloaded');
/** HTTP 500 body of the `server_error` fault. */
export const ANTHROPIC_API_ERROR = anthropicError('api_error', 'Internal server error');

/**
 * Anthropic's authentication and error wording. A missing `anthropic-version` is a 400, as on the real API
 * (it is a malformed request, not a bad credential); a missing `x-api-key` a 401.
 */
export const ANTHROPIC_DIALECT: ApiDialect = Object.freeze({
  authenticate: (headers: IncomingHttpHeaders) => {
    const key = headers['x-api-key'];
    if (typeof key !== 'string' || key.trim() === '') {
      return {
        status: 401,
        body: anthropicError('authentication_error', 'x-api-key header is required'),
      };
    }
    const version = headers['anthropic-version'];
    if (typeof version !== 'string' || version.trim() === '') {
      return {
        status: 400,
        body: anthropicError('invalid_request_error', 'anthropic-version: header is required'),
      };
    }
    return key.trim();
  },
  overloaded: { status: 529, body: ANTHROPIC_OVERLOADED_ERROR },
  serverError: { status: 500, body: ANTHROPIC_API_ERROR },
  unauthorized: { status: 401, body: anthropicError('authentication_error', 'invalid x-api-key') },
  invalidRequest: (message: string) => anthropicError('invalid_request_error', message),
});

/** Options of the Messages endpoint. */
export interface MessagesEndpointOptions {
  /** Request model names that report cache reads and writes (simulated prompt caching). */
  promptCachingModels?: readonly string[];
}

type Json = Record<string, unknown>;

type StopReason = 'end_turn' | 'max_tokens' | 'tool_use';

interface Reply {
  /** Text deltas whose concatenation is the text block; null for a tool call. */
  pieces: string[] | null;
  toolUse: { id: string; name: string } | null;
  stopReason: StopReason;
  usage: MessagesUsage;
}

/** Messages usage: `input_tokens` is the uncached remainder of the prompt. */
export interface MessagesUsage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  output_tokens: number;
}

const invalid = (message: string, model?: string, stream?: boolean): ApiRejection => ({
  status: 400,
  error: anthropicError('invalid_request_error', message),
  ...(model === undefined ? {} : { model }),
  ...(stream === undefined ? {} : { stream }),
});

/** Whether any turn carries a `tool_use` or `tool_result` block. */
const usesToolBlocks = (messages: readonly unknown[]): boolean =>
  messages.some(
    (m) =>
      isRecord(m) &&
      Array.isArray(m.content) &&
      m.content.some((b) => isRecord(b) && (b.type === 'tool_use' || b.type === 'tool_result')),
  );

/** Creates the Messages endpoint. */
export function createMessagesEndpoint(options: MessagesEndpointOptions = {}): ApiEndpoint {
  const cachingModels = new Set(options.promptCachingModels ?? []);
  const promptCache = new PromptCache();

  return {
    method: 'POST',
    path: '/v1/messages',
    dialect: ANTHROPIC_DIALECT,
    parse(raw: Buffer): ApiCall | ApiRejection {
      const body = parseJson(raw);
      if (!isRecord(body)) return invalid('There was an error parsing the body of your request: not JSON.');
      const stream = body.stream === true;
      const model = typeof body.model === 'string' ? body.model : '';
      if (model === '') return invalid('model: Field required', undefined, stream);
      const cap = body.max_tokens;
      if (typeof cap !== 'number' || !Number.isInteger(cap) || cap < 1) {
        return invalid(
          cap === undefined ? 'max_tokens: Field required' : 'max_tokens: must be a positive integer',
          model,
          stream,
        );
      }
      const messages = body.messages;
      if (!Array.isArray(messages)) return invalid('messages: Field required', model, stream);
      if (messages.length === 0) return invalid('messages: at least one message is required', model, stream);
      // As the real API refuses it: tool blocks in the conversation need tool definitions.
      if (usesToolBlocks(messages) && !(Array.isArray(body.tools) && body.tools.length > 0))
        return invalid(
          'Requests which include `tool_use` or `tool_result` blocks must define tools.',
          model,
          stream,
        );
      let directives: RequestDirectives | null;
      try {
        directives = findDirectives(body.system, messages);
      } catch (error) {
        if (!(error instanceof FaultSyntaxError)) throw error;
        return invalid(error.message, model, stream);
      }
      return {
        model,
        stream,
        directives,
        body,
        respond: (ex, plan) => {
          const reply = answer(body, model, cap, plan, cachingModels.has(model) ? promptCache : null);
          return stream ? sendStream(ex, model, reply, plan) : sendMessage(ex, model, reply, plan);
        },
      };
    },
  };
}

function answer(
  body: Json,
  model: string,
  cap: number,
  plan: FaultPlan,
  promptCache: PromptCache | null,
): Reply {
  const messagesJson = JSON.stringify(body.messages);
  const systemJson = body.system === undefined ? '' : JSON.stringify(body.system);
  const hash = fnv1a(systemJson, fnv1a(messagesJson, fnv1a(model)));
  const toolName = forcedToolName(body);

  const prompt = countMessagesPromptTokens(body);
  let read = 0;
  let written = 0;
  if (promptCache !== null) {
    const key = `${systemJson}\0${messagesJson}\0${body.tools === undefined ? '' : JSON.stringify(body.tools)}`;
    // A prompt seen before is read from the cache; a new one is written to it (both need 1024+ tokens).
    if (promptCache.remember(model, key)) read = cachedTokensFor(prompt);
    else written = cachedTokensFor(prompt);
  }
  const usage = (output: number): MessagesUsage => ({
    input_tokens: prompt - read - written,
    cache_creation_input_tokens: written,
    cache_read_input_tokens: read,
    output_tokens: output,
  });

  if (toolName !== null) {
    const random = mulberry32(hash);
    let id = 'toolu_';
    for (let i = 0; i < 3; i++) id += ((random() * 0x100000000) >>> 0).toString(16).padStart(8, '0');
    return {
      pieces: null,
      toolUse: { id, name: toolName },
      stopReason: 'tool_use',
      usage: usage(TOOL_CALL_COMPLETION_TOKENS),
    };
  }
  const natural = naturalWordCount(hash);
  let words = natural;
  let stopReason: StopReason = 'end_turn';
  if (plan.completionTokens !== null) words = plan.completionTokens;
  else if (cap < natural) {
    words = cap;
    stopReason = 'max_tokens';
  }
  // Deltas: the first word bare, then " word" each, so they concatenate to the words joined by spaces.
  const pieces = generateWords(hash, words).map((word, i) => (i === 0 ? word : ` ${word}`));
  return { pieces, toolUse: null, stopReason, usage: usage(words) };
}

function contentBlocks(reply: Reply): Json[] {
  if (reply.toolUse !== null) {
    return [{ type: 'tool_use', id: reply.toolUse.id, name: reply.toolUse.name, input: {} }];
  }
  return [{ type: 'text', text: (reply.pieces ?? []).join('') }];
}

function sendMessage(ex: Exchange, model: string, reply: Reply, plan: FaultPlan): void {
  const text = JSON.stringify({
    id: messageId(),
    type: 'message',
    role: 'assistant',
    model,
    content: contentBlocks(reply),
    stop_reason: reply.stopReason,
    stop_sequence: null,
    ...(plan.omitUsage ? {} : { usage: reply.usage }),
  });
  if (plan.error === 'drop_mid') sendTruncatedJson(ex, text);
  else sendJson(ex, 200, text);
}

/** One named SSE event, as Anthropic frames them: `event: <type>` then `data: <json>`. */
export function messagesEvent(data: Json): string {
  return `event: ${String(data.type)}\ndata: ${JSON.stringify(data)}\n\n`;
}

function sendStream(ex: Exchange, model: string, reply: Reply, plan: FaultPlan): Promise<void> {
  const { usage } = reply;
  const events: string[] = [
    messagesEvent({
      type: 'message_start',
      message: {
        id: messageId(),
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // Anthropic reports the input side up front and the output so far (1) here.
        ...(plan.omitUsage ? {} : { usage: { ...usage, output_tokens: 1 } }),
      },
    }),
  ];
  if (reply.toolUse !== null) {
    events.push(
      messagesEvent({
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'tool_use', id: reply.toolUse.id, name: reply.toolUse.name, input: {} },
      }),
      messagesEvent({ type: 'ping' }),
      messagesEvent({
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'input_json_delta', partial_json: '' },
      }),
      messagesEvent({
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'input_json_delta', partial_json: '{}' },
      }),
    );
  } else {
    events.push(
      messagesEvent({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
      messagesEvent({ type: 'ping' }),
    );
    for (const piece of reply.pieces ?? []) {
      events.push(
        messagesEvent({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: piece } }),
      );
    }
  }
  events.push(
    messagesEvent({ type: 'content_block_stop', index: 0 }),
    messagesEvent({
      type: 'message_delta',
      delta: { stop_reason: reply.stopReason, stop_sequence: null },
      // Cumulative output tokens; the input side was in message_start.
      ...(plan.omitUsage ? {} : { usage: { output_tokens: usage.output_tokens } }),
    }),
    messagesEvent({ type: 'message_stop' }),
  );
  return sendFramedEvents(
    ex,
    events,
    {
      chunkDelayMs: plan.chunkDelayMs,
      dropAfterChunks: plan.error === 'drop_mid' || plan.error === 'error_mid' ? plan.dropAfterChunks : null,
      // Anthropic's mid-stream failure: an `error` event (overloaded, most often), then the end.
      errorEvent: plan.error === 'error_mid' ? messagesEvent({ ...ANTHROPIC_OVERLOADED_ERROR }) : null,
    },
    (event) => event,
    '',
  );
}

/**
 * Prompt tokens of a Messages request, with the chat endpoint's formula (see tokens.ts) carried over:
 * 3 for priming; the system prompt (string or text blocks) as a message of its own; per message 3 plus its
 * text blocks, 85 per image, a `tool_use`'s name and JSON input, a `tool_result`'s text; and the tokens of
 * `JSON.stringify(tools)`. The total is what `input_tokens` + both cache counts add up to.
 */
export function countMessagesPromptTokens(body: {
  system?: unknown;
  messages?: unknown;
  tools?: unknown;
}): number {
  let total = REPLY_PRIMING_TOKENS;
  if (body.system !== undefined) total += TOKENS_PER_MESSAGE + contentTokens(body.system);
  if (Array.isArray(body.messages)) {
    for (const message of body.messages) {
      total += TOKENS_PER_MESSAGE + (isRecord(message) ? contentTokens(message.content) : 0);
    }
  }
  if (Array.isArray(body.tools) && body.tools.length > 0)
    total += countTextTokens(JSON.stringify(body.tools));
  return total;
}

function contentTokens(content: unknown): number {
  if (typeof content === 'string') return countTextTokens(content);
  if (!Array.isArray(content)) return 0;
  let total = 0;
  for (const block of content) {
    if (!isRecord(block)) continue;
    if (block.type === 'text' && typeof block.text === 'string') total += countTextTokens(block.text);
    else if (block.type === 'image') total += TOKENS_PER_IMAGE;
    else if (block.type === 'tool_use') {
      if (typeof block.name === 'string') total += countTextTokens(block.name);
      total += countTextTokens(JSON.stringify(block.input ?? {}));
    } else if (block.type === 'tool_result') total += contentTokens(block.content);
  }
  return total;
}

/** Collects `[[sim: ...]]` directives from the system prompt and every message's text, in order. */
function findDirectives(system: unknown, messages: unknown[]): RequestDirectives | null {
  let directives: RequestDirectives | null = null;
  const scan = (content: unknown): void => {
    if (typeof content === 'string') {
      if (content.includes(DIRECTIVE_MARKER))
        directives = mergeDirectives(directives, parseInlineDirectives(content));
    } else if (Array.isArray(content)) {
      for (const block of content) {
        if (!isRecord(block)) continue;
        if (typeof block.text === 'string') scan(block.text);
        else if (block.type === 'tool_result') scan(block.content);
      }
    }
  };
  scan(system);
  for (const message of messages) if (isRecord(message)) scan(message.content);
  return directives;
}

/** The tool to call when the request forces one (`tool_choice` `any` or a named `tool`). */
function forcedToolName(body: Json): string | null {
  const tools = body.tools;
  if (!Array.isArray(tools) || tools.length === 0) return null;
  const choice = body.tool_choice;
  if (!isRecord(choice)) return null;
  if (choice.type === 'tool') return typeof choice.name === 'string' ? choice.name : null;
  if (choice.type !== 'any') return null;
  const first: unknown = tools[0];
  return isRecord(first) && typeof first.name === 'string' ? first.name : 'tool';
}

function messageId(): string {
  return `msg_${randomUUID().replaceAll('-', '')}`;
}

function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
