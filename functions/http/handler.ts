import { Readable } from 'node:stream';
import middy from '@middy/core';
import { executionModeStreamifyResponse } from '@middy/core/StreamifyResponse';
import type { APIGatewayProxyEvent } from 'aws-lambda';
import { createLogger, type Logger } from '#adapters/logger.ts';
import { ApiError, InternalError, RouteNotFoundError } from '#core/errors.ts';
import { runAfterResponse } from './after-response.ts';
import { CORS_HEADERS, preflightResponse } from './cors.ts';
import { type HttpEvent, type HttpResponse, type LambdaContext, requestIdOf } from './lambda.ts';
import { asHttpEvent } from './rest-event.ts';

export type HttpHandlerFn = (event: HttpEvent, context: LambdaContext) => Promise<HttpResponse>;

export const JSON_HEADERS = { 'content-type': 'application/json' } as const;

/** The OpenAI-shaped error response for any thrown value; unexpected errors become a masked 500. */
export const errorResponse = (error: unknown, requestId: string): HttpResponse => {
  const apiError = error instanceof ApiError ? error : new InternalError(error);
  return {
    statusCode: apiError.status,
    headers: { ...JSON_HEADERS, ...CORS_HEADERS, ...apiError.headers, 'x-request-id': requestId },
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
    const logger = loggerOrNone(log);
    if (!(error instanceof ApiError)) logger.error('unhandled error', { requestId, error });
    else if (error.status >= 500) logger.warn('request failed', { requestId, status: error.status, error });
    request.response = errorResponse(error, requestId);
  },
});

/**
 * The function's logger — which is its container's: a function that cannot build its container (a bad setting)
 * has none, and the error that says so must still become the client's OpenAI-shaped 500, not the platform's bare 502.
 * It is said by a logger of its own at `warn` (the project's line, which Lambda's log-level filter reads), by name and
 * message only (no cause, whose fields might hold a setting's value).
 */
const loggerOrNone = (log: () => Logger): Pick<Logger, 'error' | 'warn'> => {
  try {
    return log();
  } catch (failure) {
    const fallback = createLogger('warn', { logger: said(failure) });
    const named =
      (write: Logger['error']) =>
      (message: string, fields?: { error?: unknown }): void =>
        write(message, { ...fields, error: said(fields?.error) });
    return { error: named(fallback.error), warn: named(fallback.warn) };
  }
};

/** An error by name and message only: its cause chain, which the logger would follow, might hold a setting's value. */
const said = (error: unknown): string =>
  error instanceof Error ? `${error.name}: ${error.message}` : String(error);

const CORS_HEADER_ENTRIES = Object.entries(CORS_HEADERS);

/** Every response carries `x-request-id` and the CORS headers, successes included (errors get them above). */
const commonHeaders: middy.MiddlewareObj<HttpEvent, HttpResponse, Error, LambdaContext> = {
  after: (request) => {
    const response = request.response;
    if (!response) return;
    response.headers['x-request-id'] ??= requestIdOf(request.context);
    for (const [name, value] of CORS_HEADER_ENTRIES) response.headers[name] ??= value;
  },
};

/** Above this many characters middy writes a string body in slices, waiting for 'drain' between them. */
const MIDDY_SLICE_CHARS = 16_384;

/**
 * A response stream that a client's hang-up destroyed never drains, and middy's sliced write of a long string
 * waits for 'drain' without watching for the close: the invocation would never end, and the work after the
 * response — the call's settlement — never run (an embeddings reply of 1536 dimensions is ~30 KB). A stream
 * body is piped instead, and a pipeline ends with its destination's close. Short strings are written at once.
 */
const pipeLongBody = (request: { response: HttpResponse | null | undefined }): void => {
  const response = request.response;
  if (typeof response?.body === 'string' && response.body.length > MIDDY_SLICE_CHARS)
    response.body = Readable.from([Buffer.from(response.body)]);
};

/** Pipes every long body, errors' included; used first, so that its hooks run last. */
const longBodiesPiped: middy.MiddlewareObj<HttpEvent, HttpResponse, Error, LambdaContext> = {
  after: pipeLongBody,
  onError: pipeLongBody,
};

/** Function URLs and the REST API's streaming integrations send different event shapes (rest-event.ts). */
const functionUrlShape: middy.MiddlewareObj<
  HttpEvent | APIGatewayProxyEvent,
  HttpResponse,
  Error,
  LambdaContext
> = {
  before: (request) => {
    request.event = asHttpEvent(request.event);
  },
};

/**
 * A Function URL hands its function every method and every path below it; the local host and the REST API route
 * only these. So the function itself answers a CORS preflight, and refuses any other method, or a path it does not
 * serve (`path`, when it serves one), as the routers do (404 unknown_url, OpenAI's answer for a method a path does not
 * serve) — before the key or the body is read: a chat function asked for `/v1/embeddings` is not to read an
 * embeddings body as a chat call. A preflight is answered only by a function that can serve: `ready` builds what its
 * calls need (kept after the first), and a function that cannot start fails the preflight as it fails every call —
 * which the uptime probe, asking for preflights, must see (ADR 0008).
 */
const allowMethods = (
  methods: readonly string[],
  ready: () => unknown,
  path: string | null,
): middy.MiddlewareObj<HttpEvent, HttpResponse, Error, LambdaContext> => ({
  before: (request) => {
    const { method } = request.event.requestContext.http;
    if (path !== null && withoutTrailingSlashes(request.event.rawPath) !== path)
      throw new RouteNotFoundError(method, request.event.rawPath);
    if (methods.includes(method)) return;
    if (method === 'OPTIONS') {
      ready();
      return preflightResponse(request.event, methods, requestIdOf(request.context));
    }
    throw new RouteNotFoundError(method, request.event.rawPath);
  },
});

/**
 * Wraps an HTTP handler for Lambda response streaming (Function URL `RESPONSE_STREAM`, API Gateway
 * `STREAM`): the handler returns status, headers and a string or stream body; middy writes the HTTP
 * prelude and pipes the body. Work registered with `afterResponse` runs after the stream has closed.
 */
export const httpHandler = (
  fn: HttpHandlerFn,
  log: () => Logger,
  methods: readonly string[] = ['POST'],
  // What the function's calls need (its container), built before a preflight is answered; by default the logger,
  // which is the container's in every function.
  ready: () => unknown = log,
  // The one path the function serves (a trailing slash aside); null: it tells its paths apart itself.
  path: string | null = null,
) =>
  middy<HttpEvent | APIGatewayProxyEvent, HttpResponse, Error, LambdaContext>({
    executionMode: executionModeStreamifyResponse,
    // Streams outlive the handler's promise; an early-timeout race on it would cut nothing useful.
    timeoutEarlyInMillis: 0,
    requestEnd: runAfterResponse,
  })
    // First, so that every later middleware sees the Function URL shape.
    .use(functionUrlShape)
    .use(longBodiesPiped)
    .use(commonHeaders)
    .use(errorHandler(log))
    .use(allowMethods(methods, ready, path))
    .handler((event, context) => fn(event as HttpEvent, context));

/**
 * A path without its trailing slashes, so that a function serves `/v1/models/` as `/v1/models` (and its own path
 * with or without one). Not `replace(/\/+$/, '')`: that regex retries from every slash of a run
 * that does not end the path, so `/v1/models/` + 16,000 slashes + `x` held an instance ~0.3 s per request.
 */
export const withoutTrailingSlashes = (path: string): string => {
  let end = path.length;
  while (end > 0 && path.charCodeAt(end - 1) === 0x2f) end--;
  return path.slice(0, end);
};
