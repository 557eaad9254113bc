/**
 * Deterministic token accounting with the o200k_base encoding.
 *
 * The prompt formula is a simplified version of OpenAI's chat accounting, chosen so that a gateway can
 * reproduce it exactly with the same tokenizer:
 *
 * - per message: tokens of its text content (a string, or each `text` part of a content array) plus the
 *   tokens of every tool call's `function.name` and `function.arguments`, plus 3;
 * - 85 per `image_url` content part (other part types, e.g. audio or files, count 0);
 * - 3 for priming the assistant reply;
 * - tokens of `JSON.stringify(tools)` when `tools` is a non-empty array.
 */
import { o200kTokenCounter } from '#adapters/tokenizer.ts';

/** Tokens added per message for the role and separators. */
export const TOKENS_PER_MESSAGE = 3;
/** Tokens added once for priming the assistant reply. */
export const REPLY_PRIMING_TOKENS = 3;
/** Flat cost of one `image_url` content part, whatever its size. */
export const TOKENS_PER_IMAGE = 85;

/**
 * o200k_base token count of `text`, treating special-token markers (`<|endoftext|>`) as plain text — an upstream
 * never rejects a prompt for containing one. The gateway's own counter: the same figures as its estimates, and
 * linear in the text (BPE on one 4 MB word froze the simulator's thread for minutes, and every upstream call of
 * the local stack with it).
 */
export function countTextTokens(text: string): number {
  return text.length === 0 ? 0 : o200kTokenCounter.count(text);
}

/** Anything shaped like a chat completion request; unknown or malformed fields are skipped. */
export interface PromptLike {
  messages?: unknown;
  tools?: unknown;
}

/** Counts the prompt tokens of a chat completion request body with the formula described above. */
export function countPromptTokens(body: PromptLike): number {
  let total = REPLY_PRIMING_TOKENS;
  if (Array.isArray(body.messages)) {
    for (const message of body.messages) total += countMessageTokens(message);
  }
  if (Array.isArray(body.tools) && body.tools.length > 0)
    total += countTextTokens(JSON.stringify(body.tools));
  return total;
}

function countMessageTokens(message: unknown): number {
  let total = TOKENS_PER_MESSAGE;
  if (!isRecord(message)) return total;
  const content = message.content;
  if (typeof content === 'string') {
    total += countTextTokens(content);
  } else if (Array.isArray(content)) {
    for (const part of content) {
      if (!isRecord(part)) continue;
      if (part.type === 'text' && typeof part.text === 'string') total += countTextTokens(part.text);
      else if (part.type === 'image_url') total += TOKENS_PER_IMAGE;
    }
  }
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      if (!isRecord(call) || !isRecord(call.function)) continue;
      const { name, arguments: args } = call.function;
      if (typeof name === 'string') total += countTextTokens(name);
      if (typeof args === 'string') total += countTextTokens(args);
    }
  }
  return total;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}
