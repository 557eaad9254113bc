import { ApiError, UpstreamFaultError } from '#core/errors.ts';

/** Response headers of an event stream; `x-accel-buffering` stops proxies from holding chunks back. */
export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
} as const;

/** One event; data of several lines takes a `data:` field per line, as SSE requires. */
export const frame = (data: string): string =>
  data.includes('\n') ? `data: ${data.replaceAll('\n', '\ndata: ')}\n\n` : `data: ${data}\n\n`;

export const DONE_FRAME = 'data: [DONE]\n\n';

/**
 * The explicit end of a stream that broke after its first byte: an OpenAI-shaped error object as the last
 * event, and no `[DONE]`. SDKs (openai, Vercel AI) raise it as an error instead of a silently short reply.
 */
export const errorFrame = (error: unknown): string => {
  const apiError =
    error instanceof ApiError
      ? error
      : new UpstreamFaultError(
          'The upstream connection failed mid-stream; the response is incomplete. Please retry.',
        );
  const body = apiError.toJSON();
  body.error.code ??= 'stream_interrupted';
  return frame(JSON.stringify(body));
};
