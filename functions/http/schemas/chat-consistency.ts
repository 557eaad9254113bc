import type { ChatRequest } from '#core/chat.ts';
import { InvalidRequestError } from '#core/errors.ts';

/**
 * The rules across a chat request's fields that OpenAI enforces and a schema cannot say: a tool choice needs
 * tools and must name one of them; every tool result answers a call of the assistant message right before its
 * run of results, and every call is answered. Passed on unchecked, such a request succeeds on one upstream,
 * fails on another (Anthropic refuses unanswered calls) and is silently reinterpreted by a third — so the
 * answer would depend on which deployment the router picked. Refused here, it is the same 400 everywhere and
 * nothing is spent.
 */
export const checkChatConsistency = (request: ChatRequest): void => {
  checkToolChoice(request);
  checkToolResults(request.messages);
};

const checkToolChoice = ({ tools, tool_choice: choice }: ChatRequest): void => {
  if (choice === undefined) return;
  if (tools === undefined) {
    throw new InvalidRequestError(
      "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
      'invalid_value',
      { param: 'tool_choice' },
    );
  }
  if (typeof choice === 'string') return;
  const wanted = (choice.function as { name: string }).name;
  const names = tools.map((tool) => (tool.function as { name: string }).name);
  if (!names.includes(wanted)) {
    throw new InvalidRequestError(
      `Invalid value for 'tool_choice': the function '${wanted}' is not among 'tools' (${names.map((n) => `'${n}'`).join(', ')}).`,
      'invalid_value',
      { param: 'tool_choice.function.name' },
    );
  }
};

const checkToolResults = (messages: ChatRequest['messages']): void => {
  /** Calls of the latest assistant message with tool calls, not yet answered; null outside such a run. */
  let open: { index: number; ids: Set<string> } | null = null;
  const unanswered = () => {
    if (!open || open.ids.size === 0) return;
    throw new InvalidRequestError(
      `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...open.ids].join(', ')}`,
      'invalid_value',
      { param: `messages[${open.index}].tool_calls` },
    );
  };
  messages.forEach((message, i) => {
    if (message.role === 'tool') {
      if (!open) {
        throw new InvalidRequestError(
          "Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls'.",
          'invalid_value',
          { param: `messages[${i}].role` },
        );
      }
      if (!open.ids.delete(message.tool_call_id)) {
        throw new InvalidRequestError(
          `Invalid parameter: 'tool_call_id' of '${message.tool_call_id}' not found in 'tool_calls' of previous message (or already answered).`,
          'invalid_value',
          { param: `messages[${i}].tool_call_id` },
        );
      }
      return;
    }
    unanswered();
    open =
      message.role === 'assistant' && message.tool_calls
        ? { index: i, ids: new Set(message.tool_calls.map((call) => call.id)) }
        : null;
  });
  unanswered();
};
