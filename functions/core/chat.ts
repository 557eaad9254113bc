import { InvalidRequestError } from './errors.ts';
import type { TokenCounter } from './ports.ts';
import type { Deployment, Model } from './registry.ts';
import { type Usage, withinCompletionLimit } from './usage.ts';

export interface TextPart {
  type: 'text';
  text: string;
}

export interface ImagePart {
  type: 'image_url';
  image_url: { url: string; detail?: 'auto' | 'low' | 'high' | undefined };
}

export type ContentPart = TextPart | ImagePart;

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: 'system'; content: string | TextPart[]; name?: string | undefined }
  | { role: 'user'; content: string | ContentPart[]; name?: string | undefined }
  | {
      role: 'assistant';
      content?: string | TextPart[] | null | undefined;
      name?: string | undefined;
      tool_calls?: ToolCall[] | undefined;
      refusal?: string | null | undefined;
      annotations?: unknown[] | undefined;
    }
  | { role: 'tool'; content: string | TextPart[]; tool_call_id: string };

/** A validated `POST /v1/chat/completions` body: exactly the spec's whitelist (spec §4). */
export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  stream?: boolean | undefined;
  max_tokens?: number | undefined;
  temperature?: number | undefined;
  top_p?: number | undefined;
  stop?: string | string[] | undefined;
  presence_penalty?: number | undefined;
  frequency_penalty?: number | undefined;
  response_format?: Record<string, unknown> | undefined;
  tools?: Record<string, unknown>[] | undefined;
  tool_choice?: string | Record<string, unknown> | undefined;
  seed?: number | undefined;
  n?: number | undefined;
  stream_options?:
    | { include_usage?: boolean | undefined; include_obfuscation?: boolean | undefined }
    | undefined;
}

/** Spec §4: temperature defaults to 0.7 when the client leaves it out. */
export const DEFAULT_TEMPERATURE = 0.7;

/**
 * Completion cap when the client sends no `max_tokens`. Every upstream call carries a cap so the
 * worst-case cost of a call is known before it is made (it is what the wallet holds).
 */
export const DEFAULT_MAX_TOKENS = 4096;

/** Spec §4 rule 2: added for auto-language models when the client sent no system message. */
export const LANGUAGE_SYSTEM_MESSAGE =
  "Reply in the language of the user's most recent message. If that language is unclear, reply in English.";

/** A request after the spec's rules, ready to be sent to any deployment of its model. */
export interface PreparedChat {
  readonly request: ChatRequest;
  readonly model: Model;
  readonly messages: ChatMessage[];
  /** Estimated prompt tokens (real tokenizer), for the context check, limits and the hold. */
  readonly promptTokens: number;
  /** Completion cap per choice actually sent upstream. */
  readonly maxTokens: number;
  /** Number of choices requested. */
  readonly choices: number;
  readonly stream: boolean;
  /** Whether the client asked for the usage chunk; upstream always gets `include_usage`. */
  readonly clientWantsUsage: boolean;
}

/**
 * Applies the spec's chat rules to a validated request and checks it against the model:
 * the auto-language system message, image input only on multimodal models, and the context window.
 */
export const prepareChat = (request: ChatRequest, model: Model, tokens: TokenCounter): PreparedChat => {
  rejectImagesUnlessMultimodal(request.messages, model);
  const messages = withLanguageRule(request.messages, model);
  const context = model.contextWindow ?? Number.POSITIVE_INFINITY;
  const promptTokens = estimatePromptTokens(messages, request, tokens, context);
  const maxTokens = completionCap(request, model, promptTokens);
  return {
    request,
    model,
    messages,
    promptTokens,
    maxTokens,
    choices: request.n ?? 1,
    stream: request.stream === true,
    clientWantsUsage: request.stream_options?.include_usage === true,
  };
};

/** Spec §4 rule 2. */
export const withLanguageRule = (messages: ChatMessage[], model: Model): ChatMessage[] => {
  if (!model.flags.autoLanguage || messages.some((m) => m.role === 'system')) return messages;
  return [{ role: 'system', content: LANGUAGE_SYSTEM_MESSAGE }, ...messages];
};

/**
 * An upstream's refusal of a request the language rule added a message to names that message list's indices
 * (`messages[2].content[0]`, in `param` and in the text); the client's list is one shorter. The refusal in the
 * client's indices: a message the client did not send keeps its index.
 */
export const inClientIndices = (error: unknown, prepared: PreparedChat): unknown => {
  const added = prepared.messages.length - prepared.request.messages.length;
  if (added <= 0 || !(error instanceof InvalidRequestError)) return error;
  const shift = (text: string) =>
    text.replace(/messages\[(\d+)\]/g, (whole, index: string) =>
      Number(index) >= added ? `messages[${Number(index) - added}]` : whole,
    );
  return new InvalidRequestError(shift(error.message), error.code, {
    param: error.param === null ? null : shift(error.param),
    headers: error.headers,
    cause: error.cause,
  });
};

const rejectImagesUnlessMultimodal = (messages: ChatMessage[], model: Model): void => {
  if (model.flags.multimodal) return;
  messages.forEach((message, i) => {
    if (message.role !== 'user' || typeof message.content === 'string') return;
    const j = message.content.findIndex((part) => part.type === 'image_url');
    if (j >= 0) {
      throw new InvalidRequestError(
        `The model \`${model.id}\` does not accept image input.`,
        'invalid_value',
        {
          param: `messages[${i}].content[${j}]`,
        },
      );
    }
  });
};

/** The most completion tokens a call can be billed: its cap on each of the choices it asked for. */
export const completionLimit = (prepared: PreparedChat): number => prepared.maxTokens * prepared.choices;

/** Room for what a provider's template adds around a prompt (role markers, a tool-use preamble of ~350 tokens). */
const TEMPLATE_ALLOWANCE = 4096;

/**
 * The most prompt tokens a call can be billed. A tokenizer makes at most one token of each UTF-8 byte of text, so
 * a text-only prompt has at most the bytes of everything it sends that a template can render — the messages whole
 * (tool call ids, names, annotations), the tools, the response format and the tool choice, as JSON — doubled for
 * slack, plus what a provider's template adds. An image has no such bound, so a prompt with one is held to the
 * context window only. Never below our own estimate. A report above this is a provider's error (seen: a billion
 * tokens for three token ids), not what the client sent. Computed once per call.
 */
export const promptCeiling = (prepared: PreparedChat): number => {
  const known = ceilings.get(prepared);
  if (known !== undefined) return known;
  const context = prepared.model.contextWindow ?? Number.POSITIVE_INFINITY;
  const hasImage = prepared.messages.some(
    (m) => Array.isArray(m.content) && m.content.some((part) => part.type === 'image_url'),
  );
  let bound = context;
  if (!hasImage) {
    const { tools, response_format, tool_choice } = prepared.request;
    const sent = JSON.stringify({ messages: prepared.messages, tools, response_format, tool_choice });
    bound = Math.min(context, TEMPLATE_ALLOWANCE + 2 * Buffer.byteLength(sent, 'utf8'));
  }
  const ceiling = Math.max(prepared.promptTokens, bound);
  ceilings.set(prepared, ceiling);
  return ceiling;
};

const ceilings = new WeakMap<PreparedChat, number>();

/**
 * An upstream's usage as it may be billed: its completion held to the completion limit and its prompt to the
 * prompt ceiling. The same object when nothing is above them (the ceiling is computed only when the report
 * exceeds our estimate).
 */
export const billableChatUsage = (prepared: PreparedChat, usage: Usage): Usage => {
  const capped = withinCompletionLimit(usage, completionLimit(prepared));
  if (capped.promptTokens <= prepared.promptTokens) return capped;
  const ceiling = promptCeiling(prepared);
  if (capped.promptTokens <= ceiling) return capped;
  return {
    ...capped,
    promptTokens: ceiling,
    cachedPromptTokens: Math.min(capped.cachedPromptTokens, ceiling),
  };
};

const completionCap = (request: ChatRequest, model: Model, promptTokens: number): number => {
  const context = model.contextWindow ?? Number.POSITIVE_INFINITY;
  const room = context - promptTokens;
  if (room < 1) {
    // Past the window the count stopped early (estimatePromptTokens): a lower bound, said as one.
    throw new InvalidRequestError(
      `This model's maximum context length is ${context} tokens, but the messages take ${room < 0 ? 'at least ' : ''}${promptTokens}.`,
      'context_length_exceeded',
      { param: 'messages' },
    );
  }
  if (request.max_tokens !== undefined) {
    if (request.max_tokens > room) {
      throw new InvalidRequestError(
        `This model's maximum context length is ${context} tokens. However, you requested ${promptTokens + request.max_tokens} tokens (${promptTokens} in the messages, ${request.max_tokens} in the completion). Please reduce the length of the messages or completion.`,
        'context_length_exceeded',
        { param: 'messages' },
      );
    }
    return request.max_tokens;
  }
  return Math.min(model.defaultMaxTokens ?? DEFAULT_MAX_TOKENS, room);
};

/**
 * Tokens an image part is assumed to take: a high-detail 1024×1024 image in the reference tokenizer's
 * accounting. Estimates err high because they size holds and limit charges.
 */
export const IMAGE_TOKEN_ESTIMATE = 765;
/** Per-message framing tokens of the chat template (role markers), as the reference counts them. */
const MESSAGE_OVERHEAD = 3;
/** Tokens priming the assistant's reply. */
const REPLY_PRIMING = 3;

/** What a prompt is made of, in the order the upstream renders it: texts to count and fixed token amounts. */
function* promptPieces(
  messages: ChatMessage[],
  { tools, response_format: format }: Pick<ChatRequest, 'tools' | 'response_format'>,
): Generator<string | number> {
  yield REPLY_PRIMING;
  for (const message of messages) {
    yield MESSAGE_OVERHEAD;
    const content = message.content;
    if (typeof content === 'string') yield content;
    else if (content) {
      for (const part of content) yield part.type === 'text' ? part.text : IMAGE_TOKEN_ESTIMATE;
    }
    if (message.role === 'assistant' && message.tool_calls) {
      for (const call of message.tool_calls) {
        yield call.function.name;
        yield call.function.arguments;
      }
    }
    if ('name' in message && message.name) {
      yield message.name;
      yield 1;
    }
  }
  // Definitions the upstream renders into the prompt, as its own usage will count them.
  if (tools && tools.length > 0) yield JSON.stringify(tools);
  if (format?.type === 'json_schema') yield JSON.stringify(format.json_schema);
}

/**
 * The prompt's tokens: exact while they are at most `limit` (the context window), else some number above it.
 * Counting stops once the limit is passed: the request is refused then anyway, and the count runs before
 * admission, for any key, even an empty wallet's — counted to its end, a 4 MB body of unique words held its
 * instance for 18 s.
 */
export const estimatePromptTokens = (
  messages: ChatMessage[],
  request: Pick<ChatRequest, 'tools' | 'response_format'>,
  tokens: TokenCounter,
  limit = Number.POSITIVE_INFINITY,
): number => {
  let total = 0;
  for (const piece of promptPieces(messages, request)) {
    if (typeof piece === 'number') total += piece;
    else total += Number.isFinite(limit) ? tokens.countUpTo(piece, limit - total) : tokens.count(piece);
    if (total > limit) break;
  }
  return total;
};

/**
 * Marks an upstream body whose `temperature` is our default (spec §4), not the client's. Every deployment still gets
 * it in the body, as before; an adapter whose upstream refuses `temperature` beside `top_p` (Anthropic's newer
 * models) asks here whether it may leave ours out to send the client's `top_p`. A non-enumerable symbol: neither
 * serialised nor copied, so whatever is in the body is what is sent — and no WeakSet, whose entries every
 * young-generation collection has to trace, on the per-call path.
 */
const TEMPERATURE_DEFAULTED: unique symbol = Symbol('temperatureDefaulted');

/** Whether `body` (from `upstreamChatBody`) carries our default temperature rather than the client's. */
export const temperatureIsDefault = (body: Record<string, unknown>): boolean =>
  (body as { [TEMPERATURE_DEFAULTED]?: true })[TEMPERATURE_DEFAULTED] === true;

/**
 * The upstream body for one deployment. Spec §4 rules: the default temperature is explicit; streams
 * always ask the upstream for the usage chunk (rule 4) so billing never depends on the client;
 * reasoning parameters are added only for reasoning-tier models (rule 1), from the deployment. Fields the
 * deployment says its upstream refuses (`omitParams`) are left out.
 */
export const upstreamChatBody = (prepared: PreparedChat, deployment: Deployment): Record<string, unknown> => {
  const { request } = prepared;
  const body: Record<string, unknown> = {
    ...request,
    model: deployment.upstreamModel,
    messages: prepared.messages,
    max_tokens: prepared.maxTokens,
    temperature: request.temperature ?? DEFAULT_TEMPERATURE,
  };
  if (request.temperature === undefined)
    Object.defineProperty(body, TEMPERATURE_DEFAULTED, { value: true, enumerable: false });
  // Only include_usage goes upstream (forced: usage is what we bill); nothing else of the client's options is ours to pass.
  if (prepared.stream) body.stream_options = { include_usage: true };
  if (prepared.model.flags.reasoning && deployment.reasoningParams)
    Object.assign(body, deployment.reasoningParams);
  if (deployment.completionCapParam === 'max_completion_tokens') {
    body.max_completion_tokens = body.max_tokens;
    delete body.max_tokens;
  }
  // After the default temperature is set: a deployment that refuses the field gets neither the client's nor ours.
  if (deployment.omitParams) for (const param of deployment.omitParams) delete body[param];
  return body;
};
