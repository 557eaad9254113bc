import middy from '@middy/core';
import { executionModeStreamifyResponse } from '@middy/core/StreamifyResponse';
import type { APIGatewayProxyEvent } from 'aws-lambda';
import type { Logger } from '#adapters/logger.ts';
import { ApiError, InternalError } from '#core/errors.ts';
import { runAfterResponse } from './after-response.ts';
import { type HttpEvent, type HttpResponse, type LambdaContext, requestIdOf } from './lambda.ts';
import { asHttpEvent } from './rest-event.ts';

export type HttpHandlerFn = (event: HttpEvent, context: LambdaContext) => Promise<HttpResponse>;

export const JSON_HEADERS = { 'content-type': 'application/json' } as const;

/** The OpenAI-shaped error response for any thrown value; unexpected errors become a masked 500. */
export const errorResponse = (error: unknown, requestId: string): HttpResponse => {
  const apiError = error instanceof ApiError ? error : new InternalError(error);
  return {
    statusCode: apiError.status,
    headers: { ...JSON_HEADERS, ...apiError.headers, 'x-request-id': requestId },
    body: JSON.stringify(apiError),
  };
};

/**
 * The one place errors become responses. 4xx messages go to the client as written; anything else is
 * logged with its cause and the client gets a generic 500 — causes may hold upstream details or secrets.
 */
const errorHandler = (
  log: () => Logger,
): middy.MiddlewareObj<HttpEvent, HttpResponse, Error, LambdaContext> => ({
  onError: (request) => {
    const requestId = requestIdOf(request.context);
    const error = request.error;
    if (!(error instanceof ApiError)) log().error('unhandled error', { requestId, error });
    else if (error.status >= 500) log().warn('request failed', { requestId, status: error.status, error });
    request.response = errorResponse(error, requestId);
  },
});

/** Every response carries `x-request-id`, successes included. */
const requestIdHeader: middy.MiddlewareObj<HttpEvent, HttpResponse, Error, LambdaContext> = {
  after: (request) => {
    if (request.response) request.response.headers['x-request-id'] ??= requestIdOf(request.context);
  },
};

/**
 * Wraps an HTTP handler for Lambda response streaming (Function URL `RESPONSE_STREAM`, API Gateway
 * `STREAM`): the handler returns status, headers and a string or stream body; middy writes the HTTP
 * prelude and pipes the body. Work registered with `afterResponse` runs after the stream has closed.
 */
export const httpHandler = (fn: HttpHandlerFn, log: () => Logger) =>
  middy<HttpEvent | APIGatewayProxyEvent, HttpResponse, Error, LambdaContext>({
    executionMode: executionModeStreamifyResponse,
    // Streams outlive the handler's promise; an early-timeout race on it would cut nothing useful.
    timeoutEarlyInMillis: 0,
    requestEnd: runAfterResponse,
  })
    .use(requestIdHeader)
    .use(errorHandler(log))
    // Function URLs and the REST API's streaming integrations send different event shapes (rest-event.ts).
    .handler((event, context) => fn(asHttpEvent(event), context));
