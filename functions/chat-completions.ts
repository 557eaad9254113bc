import {
  billableChatUsage,
  completionLimit,
  inClientIndices,
  type PreparedChat,
  prepareChat,
  upstreamChatBody,
} from '#core/chat.ts';
import { affordableCompletionTokens, worstCaseChatCost } from '#core/pricing.ts';
import type { Deployment } from '#core/registry.ts';
import type { ChatCompletionResult, ChatStream, StreamMode, UpstreamCall } from '#core/upstream.ts';
import { openAiChatUsage, type Usage, withinCompletionLimit } from '#core/usage.ts';
import { chatEventStream } from '#http/chat-stream.ts';
import { JSON_HEADERS } from '#http/handler.ts';
import { inferenceHandler, logHeldReport } from '#http/inference-handler.ts';
import { header, jsonBody } from '#http/lambda.ts';
import { parseChatRequest } from '#http/schemas/chat-completions.ts';
import { SSE_HEADERS } from '#http/sse.ts';
import { type Container, containerFromEnv } from './container.ts';

/** `POST /v1/chat/completions` — streamed (SSE) or not. */
export const createHandler = (container: () => Container) =>
  inferenceHandler('chat.completions', container, async (event, call, c) => {
    // The key first, as OpenAI checks it: a caller without one learns nothing of the body's faults, and spends
    // no decoding or validation on it.
    await c.gateway.authenticate(header(event, 'authorization'), call);
    const request = parseChatRequest(jsonBody(event, c.config.maxJsonBodyBytes));
    const resolved = await c.gateway.resolve(request.model, 'chat', call);
    const prepared = prepareChat(request, resolved.model, c.tokens);
    call.stream = prepared.stream;
    const completionTokens = completionLimit(prepared);
    const admission = {
      requestId: call.requestId,
      estimatedTokens: prepared.promptTokens + completionTokens,
      holdAmount: worstCaseChatCost(resolved.model, prepared.promptTokens, completionTokens),
      affordableMaxTokens: (available: number) =>
        affordableCompletionTokens(resolved.model, prepared.promptTokens, prepared.choices, available),
    };
    // A report above what the call can be billed (its completion cap, its prompt's ceiling) is billed at those.
    const reportedUsage = (usage: Usage, billed: Usage) => logHeldReport(c.log, call, usage, billed);
    const upstream = (deployment: Deployment, keyIndex: number, signal: AbortSignal): UpstreamCall => ({
      deployment,
      keyIndex,
      signal,
      body: upstreamChatBody(prepared, deployment),
      publicModel: request.model,
      clientWantsUsage: prepared.clientWantsUsage,
    });

    const billed = { request: admission, resolved, call };

    if (!prepared.stream) {
      let result: ChatCompletionResult;
      try {
        result = await c.gateway.admitAndRoute({
          ...billed,
          cycleKeys: true,
          attempt: (d, k, signal) => c.provider(d.adapter, 'chat').complete(upstream(d, k, signal)),
        });
      } catch (error) {
        throw inClientIndices(error, prepared);
      }
      const reported = result.usage && billableChatUsage(prepared, result.usage);
      if (result.usage && reported) reportedUsage(result.usage, reported);
      const usage = reported ?? withinCompletionLimit(estimatedUsage(prepared, result, c), completionTokens);
      call.succeeded(usage);
      // An upstream that reported no usage (or none we could read, or more than the call allowed): the client
      // sees what it is billed on.
      const body =
        reported && reported === result.usage
          ? result.body
          : { ...result.body, usage: openAiChatUsage(usage) };
      return {
        statusCode: 200,
        headers: JSON_HEADERS,
        body: JSON.stringify(body),
      };
    }
    // Resolves once the first upstream event is in hand (and the call admitted): every failure before that may
    // still fall back. A stream opened for a call then refused is closed unread.
    let stream: ChatStream;
    try {
      stream = await c.gateway.admitAndRoute({
        ...billed,
        cycleKeys: false,
        // A deployment seen not to stream serves a stream with a whole reply: only when those that stream cannot.
        lastly: (d) => streamMode(c, d) === 'whole',
        attempt: (d, k, signal) => {
          if (streamMode(c, d) !== 'stream') call.wholeReplyFrom(d.id);
          return c
            .provider(d.adapter, 'chat')
            .stream(upstream(d, k, signal))
            .then((opened) => {
              if (opened.whole) call.wholeReplyFrom(d.id);
              return opened;
            });
        },
        discard: (opened) => opened.close(),
      });
    } catch (error) {
      throw inClientIndices(error, prepared);
    }
    return {
      statusCode: 200,
      headers: SSE_HEADERS,
      body: chatEventStream(
        stream,
        prepared,
        call,
        c.outputTokens,
        reportedUsage,
        c.config.streamKeepAliveMs,
      ),
    };
  });

export const handler = createHandler(containerFromEnv);

/** How a stream to the deployment is made now; `stream` where its adapter has no chat (the attempt fails over). */
const streamMode = (c: Container, deployment: Deployment): StreamMode => {
  try {
    return c.provider(deployment.adapter, 'chat').streamMode?.(deployment) ?? 'stream';
  } catch {
    return 'stream';
  }
};

interface ReplyMessage {
  content?: unknown;
  reasoning_content?: unknown;
  reasoning?: unknown;
  refusal?: unknown;
  tool_calls?: { function?: { name?: unknown; arguments?: unknown } }[];
}

/**
 * Usage counted by us when an upstream response carries none: prompt estimate plus the reply's tokens — its text,
 * the reasoning it shows (`reasoning_content`, `reasoning`), a refusal, and its tool calls' names and arguments,
 * which are completion tokens as much as text is.
 */
const estimatedUsage = (prepared: PreparedChat, result: ChatCompletionResult, c: Container): Usage => {
  let completion = 0;
  const count = (text: unknown) => {
    if (typeof text === 'string') completion += c.outputTokens.count(text);
  };
  for (const choice of (result.body.choices as { message?: ReplyMessage }[]) ?? []) {
    count(choice.message?.content);
    // Some servers send the reasoning under both names, one an alias of the other: counted once.
    count(choice.message?.reasoning_content || choice.message?.reasoning);
    count(choice.message?.refusal);
    for (const call of Array.isArray(choice.message?.tool_calls) ? choice.message.tool_calls : []) {
      count(call.function?.name);
      count(call.function?.arguments);
    }
  }
  return {
    promptTokens: prepared.promptTokens,
    completionTokens: completion,
    cachedPromptTokens: 0,
    reasoningTokens: 0,
    source: 'estimated',
  };
};
