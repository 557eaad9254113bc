import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { RequestTooLargeError, RouteNotFoundError } from '#core/errors.ts';
import type { Container } from '#functions/container.ts';
import { errorResponse } from '#http/handler.ts';
import {
  functionUrlEvent,
  invocationContext,
  invokeStreaming,
  LAMBDA_REQUEST_LIMIT_BYTES,
  readBody,
} from './function-url.ts';
import { installLambdaGlobals, isStreamingHandler, type StreamingHandler } from './lambda-runtime.ts';
import type { SiteReader } from './site.ts';

/**
 * One gateway instance of the local host: the HTTP functions' handlers, loaded once per container as a cold
 * start would, behind an HTTP server that turns requests into Function URL invocations. The local host runs
 * one on its main thread and, with `instances` > 1, more on worker threads (instance-worker.ts).
 */

/** Lambda timeout of the HTTP functions; the invocation context reports time left against it. */
const FUNCTION_TIMEOUT_MS = 300_000;

export interface Route {
  readonly method: string;
  readonly path: string;
  /** Also serves every path below `path/` (e.g. `/v1/models/{id}`). */
  readonly prefix?: boolean;
  /** The Lambda function name this route belongs to (for its invocation context). */
  readonly name: string;
  readonly handler: StreamingHandler;
}

/**
 * The handlers, as each Lambda would load them: the `awslambda` globals must exist before a handler
 * module is imported, because middy wraps the handler at import time.
 */
export const loadRoutes = async (container: Container): Promise<Route[]> => {
  installLambdaGlobals();
  const functions = [
    ['/v1/chat/completions', 'chat-completions', await import('#functions/chat-completions.ts')],
    ['/v1/embeddings', 'embeddings', await import('#functions/embeddings.ts')],
    ['/v1/audio/transcriptions', 'audio-transcriptions', await import('#functions/audio-transcriptions.ts')],
    ['/v1/audio/speech', 'audio-speech', await import('#functions/audio-speech.ts')],
  ] as const;
  const models = await import('#functions/models.ts');
  return [
    ...functions.map(([path, name, module]) => ({
      method: 'POST',
      path,
      name,
      handler: asStreaming(module.createHandler(() => container)),
    })),
    {
      method: 'GET',
      path: '/v1/models',
      prefix: true,
      name: 'models',
      handler: asStreaming(models.createHandler(() => container)),
    },
  ];
};

const asStreaming = (handler: unknown): StreamingHandler => {
  if (!isStreamingHandler(handler)) throw new Error('HTTP handlers must be response-streaming handlers');
  return handler;
};

const hostRequestId = () => `req_${randomUUID().replaceAll('-', '')}`;

const serve = async (routes: readonly Route[], req: IncomingMessage, res: ServerResponse): Promise<void> => {
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  // A CORS preflight goes to the path's function, which answers it (http/cors.ts), as on a Function URL.
  const method = req.method === 'OPTIONS' ? null : req.method;
  const route = routes.find(
    (r) =>
      (method === null || r.method === method) &&
      (r.path === path || (r.prefix && path.startsWith(`${r.path}/`))),
  );
  if (!route) {
    send(res, errorResponse(new RouteNotFoundError(req.method ?? 'GET', path), hostRequestId()));
    req.resume();
    return;
  }
  const body = await readBody(req, LAMBDA_REQUEST_LIMIT_BYTES);
  if (body === null) {
    send(res, errorResponse(new RequestTooLargeError(LAMBDA_REQUEST_LIMIT_BYTES), hostRequestId()));
    return;
  }
  await invokeStreaming(
    route.handler,
    functionUrlEvent(req, body),
    invocationContext(route.name, FUNCTION_TIMEOUT_MS),
    res,
  );
};

const send = (
  res: ServerResponse,
  response: { statusCode: number; headers: Record<string, string>; body: unknown },
) => {
  res.writeHead(response.statusCode, response.headers);
  res.end(String(response.body));
};

export interface InstanceServer {
  readonly server: Server;
  /** Requests this instance has been handed (the site's included). */
  served(): number;
}

/** The HTTP server of one instance: the site root from the bucket, everything else to the functions. */
export const createInstanceServer = (
  routes: readonly Route[],
  site: Pick<SiteReader, 'handles' | 'serve'>,
  onError: (error: unknown) => void,
): InstanceServer => {
  let served = 0;
  const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
    served++;
    (site.handles(req) ? site.serve(req, res) : serve(routes, req, res)).catch((error: unknown) => {
      onError(error);
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  });
  return { server, served: () => served };
};
