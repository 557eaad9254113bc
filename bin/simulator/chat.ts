/**
 * `POST /v1/chat/completions`: deterministic chat completions in OpenAI's wire format, streamed or not.
 *
 * The simulator is an upstream, not a validator: unknown fields are ignored and only what it needs
 * (`model`, `messages`) is required.
 */
import { randomUUID } from 'node:crypto';
import type { ApiCall, ApiEndpoint, ApiRejection } from '#sim/api.ts';
import { INVALID_JSON_ERROR, invalidRequestError, SERVER_ERROR } from '#sim/errors.ts';
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
import { sendEventStream, sseEvent } from '#sim/sse.ts';
import { fnv1a, generateWords, mulberry32, naturalWordCount } from '#sim/text.ts';
import { countPromptTokens, countTextTokens } from '#sim/tokens.ts';

/** Fixed completion tokens reported for a forced tool call. */
export const TOOL_CALL_COMPLETION_TOKENS = 5;
/** Hidden reasoning tokens per choice when the request sets `reasoning_effort` (within the completion cap). */
export const REASONING_TOKENS = 16;
/** The `system_fingerprint` of every response. */
export const SYSTEM_FINGERPRINT = 'fp_sim';
/** Largest `n` accepted, as on OpenAI. */
export const MAX_CHOICES = 128;

/** Options of the chat endpoint. */
export interface ChatEndpointOptions {
  /** Request model names that report `prompt_tokens_details` with simulated prompt caching. */
  promptCachingModels?: readonly string[];
}

type Json = Record<string, unknown>;

type FinishReason = 'stop' | 'length' | 'tool_calls';

interface Choice {
  index: number;
  /** Content deltas whose concatenation is the message content; null for a tool call. */
  pieces: string[] | null;
  toolCall: { id: string; name: string } | null;
  finishReason: FinishReason;
  completionTokens: number;
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number; audio_tokens: number };
  completion_tokens_details?: {
    reasoning_tokens: number;
    audio_tokens: number;
    accepted_prediction_tokens: number;
    rejected_prediction_tokens: number;
  };
}

/** Creates the chat completions endpoint. */
/** What a parsed JSON value (not an array) is, as OpenAI's type errors say it. */
const jsonKind = (value: unknown): string =>
  value === null ? 'null' : typeof value === 'object' ? 'an object' : `a ${typeof value}`;

export function createChatEndpoint(options: ChatEndpointOptions = {}): ApiEndpoint {
  const cachingModels = new Set(options.promptCachingModels ?? []);
  const promptCache = new PromptCache();

  return {
    method: 'POST',
    path: '/v1/chat/completions',
    parse(raw: Buffer): ApiCall | ApiRejection {
      const body = parseJson(raw);
      if (!isRecord(body)) return { status: 400, error: INVALID_JSON_ERROR };
      const model = typeof body.model === 'string' ? body.model : '';
      const stream = body.stream === true;
      if (model === '') {
        return { status: 400, stream, error: invalidRequestError('you must provide a model parameter') };
      }
      const messages = body.messages;
      if (Array.isArray(messages) && messages.length === 0) {
        return {
          status: 400,
          model,
          stream,
          error: invalidRequestError("'messages' must not be empty.", 'messages'),
        };
      }
      if (!Array.isArray(messages)) {
        return {
          status: 400,
          model,
          stream,
          error:
            messages === undefined
              ? invalidRequestError(
                  "Missing required parameter: 'messages'.",
                  'messages',
                  'missing_required_parameter',
                )
              : invalidRequestError(
                  `Invalid type for 'messages': expected an array, but got ${jsonKind(messages)} instead.`,
                  'messages',
                  'invalid_type',
                ),
        };
      }
      const n = body.n ?? 1;
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_CHOICES) {
        return {
          status: 400,
          model,
          stream,
          error: invalidRequestError(`Invalid 'n': ${JSON.stringify(n)}.`, 'n'),
        };
      }
      let directives: RequestDirectives | null;
      try {
        directives = findDirectives(messages);
      } catch (error) {
        if (!(error instanceof FaultSyntaxError)) throw error;
        return { status: 400, model, stream, error: invalidRequestError(error.message) };
      }
      return {
        model,
        stream,
        directives,
        body,
        respond: (ex, plan) => {
          const completion = complete(
            body,
            model,
            messages,
            n,
            plan,
            cachingModels.has(model) ? promptCache : null,
          );
          return stream
            ? sendStream(ex, body, model, completion, plan)
            : sendCompletion(ex, model, completion, plan);
        },
      };
    },
  };
}

interface Completion {
  choices: Choice[];
  usage: Usage;
}

function complete(
  body: Json,
  model: string,
  messages: unknown[],
  n: number,
  plan: FaultPlan,
  promptCache: PromptCache | null,
): Completion {
  const messagesJson = JSON.stringify(messages);
  // Hashing the pieces in sequence equals hashing model + messages + seed + choiceIndex concatenated.
  const seed = body.seed === undefined || body.seed === null ? '' : String(body.seed);
  const baseHash = fnv1a(seed, fnv1a(messagesJson, fnv1a(model)));
  const toolName = forcedToolName(body);
  const json = isRecord(body.response_format) && isJsonFormat(body.response_format.type);
  const cap = maxTokens(body);
  // As on OpenAI (max_completion_tokens) and other reasoning upstreams, hidden reasoning counts against the
  // completion cap: the visible answer gets what is left, so a choice never reports more than the cap.
  const reasons = body.reasoning_effort !== undefined && body.reasoning_effort !== null;
  const reasoningPerChoice = reasons ? Math.min(REASONING_TOKENS, cap ?? REASONING_TOKENS) : 0;
  const visibleCap = cap === null ? null : cap - reasoningPerChoice;

  const choices: Choice[] = [];
  let completionTokens = 0;
  for (let index = 0; index < n; index++) {
    const hash = fnv1a(String(index), baseHash);
    const choice =
      toolName !== null
        ? toolCallChoice(index, hash, toolName)
        : textChoice(index, hash, plan.completionTokens, visibleCap, json);
    completionTokens += choice.completionTokens;
    choices.push(choice);
  }

  const promptTokens = countPromptTokens(body);
  const usage: Usage = { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: 0 };
  if (promptCache !== null) {
    const prompt = body.tools === undefined ? messagesJson : `${messagesJson}\0${JSON.stringify(body.tools)}`;
    const cached = promptCache.remember(model, prompt) ? cachedTokensFor(promptTokens) : 0;
    usage.prompt_tokens_details = { cached_tokens: cached, audio_tokens: 0 };
  }
  if (reasons) {
    const reasoning = reasoningPerChoice * n;
    completionTokens += reasoning;
    usage.completion_tokens_details = {
      reasoning_tokens: reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    };
  }
  usage.completion_tokens = completionTokens;
  usage.total_tokens = promptTokens + completionTokens;
  return { choices, usage };
}

function textChoice(
  index: number,
  hash: number,
  forced: number | null,
  cap: number | null,
  json: boolean,
): Choice {
  const natural = naturalWordCount(hash);
  let count = natural;
  let finishReason: FinishReason = 'stop';
  if (forced !== null) count = forced;
  else if (cap !== null && cap < natural) {
    count = cap;
    finishReason = 'length';
  }
  const words = generateWords(hash, count);
  // Deltas: the first word bare, then " word" each, so they concatenate to the words joined by spaces.
  const pieces = words.map((word, i) => (i === 0 ? word : ` ${word}`));
  if (!json) return { index, pieces, toolCall: null, finishReason, completionTokens: count };
  // Vocabulary words never need JSON escaping, so wrapping the first and last delta keeps the
  // concatenation equal to JSON.stringify({ answer: text }).
  if (pieces.length === 0) pieces.push('{"answer":""}');
  else {
    pieces[0] = `{"answer":"${pieces[0]}`;
    pieces[pieces.length - 1] += '"}';
  }
  return { index, pieces, toolCall: null, finishReason, completionTokens: countTextTokens(pieces.join('')) };
}

function toolCallChoice(index: number, hash: number, name: string): Choice {
  const random = mulberry32(hash);
  let id = 'call_';
  for (let i = 0; i < 3; i++) id += ((random() * 0x100000000) >>> 0).toString(16).padStart(8, '0');
  return {
    index,
    pieces: null,
    toolCall: { id, name },
    finishReason: 'tool_calls',
    completionTokens: TOOL_CALL_COMPLETION_TOKENS,
  };
}

function sendCompletion(ex: Exchange, model: string, completion: Completion, plan: FaultPlan): void {
  const text = JSON.stringify({
    id: completionId(),
    object: 'chat.completion',
    created: nowSeconds(),
    model,
    system_fingerprint: SYSTEM_FINGERPRINT,
    choices: completion.choices.map((choice) => ({
      index: choice.index,
      message: {
        role: 'assistant',
        content: choice.pieces === null ? null : choice.pieces.join(''),
        refusal: null,
        ...(choice.toolCall === null
          ? {}
          : {
              tool_calls: [
                {
                  id: choice.toolCall.id,
                  type: 'function',
                  function: { name: choice.toolCall.name, arguments: '{}' },
                },
              ],
            }),
        annotations: [],
      },
      logprobs: null,
      finish_reason: choice.finishReason,
    })),
    ...(plan.omitUsage ? {} : { usage: completion.usage }),
  });
  if (plan.error === 'drop_mid') sendTruncatedJson(ex, text);
  else sendJson(ex, 200, text);
}

function sendStream(
  ex: Exchange,
  body: Json,
  model: string,
  completion: Completion,
  plan: FaultPlan,
): Promise<void> {
  const includeUsage = isRecord(body.stream_options) && body.stream_options.include_usage === true;
  // Every chunk shares this envelope; building it once keeps per-chunk work to string concatenation.
  const head =
    `{"id":"${completionId()}","object":"chat.completion.chunk","created":${nowSeconds()},` +
    `"model":${JSON.stringify(model)},"system_fingerprint":"${SYSTEM_FINGERPRINT}","choices":[`;
  const tail = includeUsage ? '],"usage":null}' : ']}';
  const chunk = (index: number, delta: string, finishReason: string | null = null): string =>
    `${head}{"index":${index},"delta":${delta},"logprobs":null,"finish_reason":${
      finishReason === null ? 'null' : `"${finishReason}"`
    }}${tail}`;

  const payloads: string[] = [];
  for (const choice of completion.choices) {
    const { index, toolCall, pieces } = choice;
    if (toolCall !== null) {
      payloads.push(chunk(index, '{"role":"assistant","content":null}'));
      payloads.push(
        chunk(
          index,
          JSON.stringify({
            tool_calls: [
              {
                index: 0,
                id: toolCall.id,
                type: 'function',
                function: { name: toolCall.name, arguments: '' },
              },
            ],
          }),
        ),
      );
      payloads.push(chunk(index, '{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}'));
    } else {
      payloads.push(chunk(index, '{"role":"assistant","content":""}'));
      for (const piece of pieces ?? []) payloads.push(chunk(index, `{"content":${JSON.stringify(piece)}}`));
    }
    payloads.push(chunk(index, '{}', choice.finishReason));
  }
  // omit_usage models an upstream that ignores include_usage: chunks keep `"usage":null`, no usage chunk.
  if (includeUsage && !plan.omitUsage) {
    payloads.push(`${head}],"usage":${JSON.stringify(completion.usage)}}`);
  }

  return sendEventStream(ex, payloads, {
    chunkDelayMs: plan.chunkDelayMs,
    dropAfterChunks: plan.error === 'drop_mid' || plan.error === 'error_mid' ? plan.dropAfterChunks : null,
    errorEvent: plan.error === 'error_mid' ? sseEvent(JSON.stringify(SERVER_ERROR)) : null,
  });
}

/** Collects `[[sim: ...]]` directives from every message's text content, in message order. */
function findDirectives(messages: unknown[]): RequestDirectives | null {
  let directives: RequestDirectives | null = null;
  for (const message of messages) {
    if (!isRecord(message)) continue;
    const content = message.content;
    if (typeof content === 'string') {
      if (content.includes(DIRECTIVE_MARKER))
        directives = mergeDirectives(directives, parseInlineDirectives(content));
    } else if (Array.isArray(content)) {
      for (const part of content) {
        if (isRecord(part) && typeof part.text === 'string' && part.text.includes(DIRECTIVE_MARKER)) {
          directives = mergeDirectives(directives, parseInlineDirectives(part.text));
        }
      }
    }
  }
  return directives;
}

/** The tool to call when the request forces one (`tool_choice` `required` or a named function). */
function forcedToolName(body: Json): string | null {
  const tools = body.tools;
  if (!Array.isArray(tools) || tools.length === 0) return null;
  const choice = body.tool_choice;
  if (isRecord(choice) && choice.type === 'function' && isRecord(choice.function)) {
    return typeof choice.function.name === 'string' ? choice.function.name : null;
  }
  if (choice !== 'required') return null;
  const first: unknown = tools[0];
  if (isRecord(first)) {
    if (isRecord(first.function) && typeof first.function.name === 'string') return first.function.name;
    if (isRecord(first.custom) && typeof first.custom.name === 'string') return first.custom.name;
  }
  return 'tool';
}

/** `max_completion_tokens` (current name) or `max_tokens` (legacy), when a usable number. */
function maxTokens(body: Json): number | null {
  const value = body.max_completion_tokens ?? body.max_tokens;
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? Math.floor(value) : null;
}

function isJsonFormat(type: unknown): boolean {
  return type === 'json_object' || type === 'json_schema';
}

function completionId(): string {
  return `chatcmpl-${randomUUID().replaceAll('-', '')}`;
}

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
