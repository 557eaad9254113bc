import { outputOf } from '#adapters/upstream/openai-compatible.ts';
import type { ChatStreamEvent } from '#core/upstream.ts';

/** One choice's chunk of an OpenAI chat stream, as an upstream writes it. */
export const chatChunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  JSON.stringify({
    id: 'c',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  });

/** An upstream event carrying `data` and no usage, its output found as the OpenAI-compatible adapter finds it. */
export const chatEvent = (data: string): ChatStreamEvent => ({
  data,
  usage: null,
  usageOnly: false,
  output: outputOf(data),
});
