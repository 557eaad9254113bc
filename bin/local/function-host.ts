import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { RequestTooLargeError, RouteNotFoundError } from '#core/errors.ts';
import type { Container } from '#functions/container.ts';
import { errorResponse } from '#http/handler.ts';
import { type FunctionDefinition, type FunctionId, functions, timeoutOf } from '#lib/functions.ts';
import {
  functionUrlEvent,
  invocationContext,
  invokeStreaming,
  LAMBDA_REQUEST_LIMIT_BYTES,
  readBody,
} from './function-url.ts';
import { installLambdaGlobals, isStreamingHandler, type StreamingHandler } from './lambda-runtime.ts';
import type { SiteReader } from './site.ts';
import { invoking } from './table-grants.ts';

/**
 * One gateway instance of the local host: the HTTP functions' handlers, loaded once per container as a cold
 * start would, behind an HTTP server that turns requests into Function URL invocations. The local host runs
 * one on its main thread and, with `instances` > 1, more on worker threads (instance-worker.ts).
 */

export interface Route {
  readonly method: string;
  readonly path: string;
  /** Also serves every path below `path/` (e.g. `/v1/models/{id}`). */
  readonly prefix?: boolean;
  /** The Lambda function this route belongs to (its invocation context, its grants). */
  readonly name: FunctionId;
  /** Its Lambda timeout, ms, as deployed: the invocation context counts down from it. */
  readonly timeoutMs: number;
  readonly handler: StreamingHandler;
}

/**
 * The handlers, as each Lambda would load them, on the routes the stacks give them (lib/functions.ts), from the same
 * table as API Gateway's. The `awslambda` globals must exist before a handler
 * module is imported, because middy wraps the handler at import time.
 */
export const loadRoutes = async (
  container: Container,
  /** Tests: Lambda timeouts (ms) other than the deployed ones, per function name, to see a call meet its end. */
  timeoutsMs: Readonly<Record<string, number>> = {},
): Promise<Route[]> => {
  installLambdaGlobals();
  const routes: Route[] = [];
  for (const [name, definition] of Object.entries(functions) as [FunctionId, FunctionDefinition][]) {
    if (definition.trigger.kind !== 'http') continue;
    const module: { createHandler: (c: () => Container) => unknown } = await import(`#functions/${name}.ts`);
    // One handler per function, whatever its routes: one Lambda, one cold start.
    const handler = asStreaming(module.createHandler(() => container));
    const timeoutMs = timeoutsMs[name] ?? timeoutOf(definition) * 1000;
    for (const { method, path } of definition.trigger.routes) {
      // `/v1/models/{id}`: every path below `/v1/models/` (its function refuses what is not one id), as a Function
      // URL hands them all to it. Only a last parameter has a prefix to stand for.
      const parameter = path.indexOf('/{');
      if (parameter !== -1 && !/^\/\{\w+\}$/.test(path.slice(parameter)))
        throw new Error(
          `${name}: the local host serves a path parameter only at the end of a route, not ${path}`,
        );
      routes.push(
        parameter === -1
          ? { method, path, name, timeoutMs, handler }
          : { method, path: path.slice(0, parameter), prefix: true, name, timeoutMs, handler },
      );
    }
  }
  return routes;
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
  let body: Buffer | null;
  try {
    body = await readBody(req, LAMBDA_REQUEST_LIMIT_BYTES);
  } catch (error) {
    // The client hung up before its body was whole: nothing was invoked (as a Function URL would not invoke
    // the function), and nobody is left to answer. Not a failure of ours.
    if (req.destroyed) return;
    throw error;
  }
  if (body === null) {
    send(res, errorResponse(new RequestTooLargeError(LAMBDA_REQUEST_LIMIT_BYTES), hostRequestId()));
    return;
  }
  await invoking.run(route.name, () =>
    invokeStreaming(
      route.handler,
      functionUrlEvent(req, body),
      invocationContext(route.name, route.timeoutMs),
      res,
    ),
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
  /**
   * Stops taking connections and lets the requests under way finish — each invocation to its end, settlement
   * record sent — for up to `graceMs`, then closes every connection; requests still running then see their
   * client hang up and settle as `client_aborted`, which they are given a moment more to do. Resolves to the
   * number of requests that had to be cut, and of those that had not ended even then.
   */
  drain(graceMs: number): Promise<DrainResult>;
}

export interface DrainResult {
  readonly cut: number;
  readonly unfinished: number;
}

/** How long a request (headers and body) may take to arrive: a 4 MiB upload on a slow line, with room. */
const REQUEST_TIMEOUT_MS = 120_000;

/** After the grace period, how long cut requests get to record their hang-up and send their settlement. */
const CUT_SETTLE_MS = 2_000;

/** The site side of an instance that serves only functions (benchmark references, tests): no site root. */
export const NO_SITE: Pick<SiteReader, 'handles' | 'serve'> = { handles: () => false, serve: async () => {} };

/** The HTTP server of one instance: the site root from the bucket, everything else to the functions. */
export const createInstanceServer = (
  routes: readonly Route[],
  site: Pick<SiteReader, 'handles' | 'serve'>,
  onError: (error: unknown) => void,
  options: { readonly requestTimeoutMs?: number; readonly checkIntervalMs?: number } = {},
): InstanceServer => {
  let served = 0;
  let draining = false;
  const running = new Set<Promise<void>>();
  // A request must arrive whole within REQUEST_TIMEOUT_MS: its body is buffered (up to Lambda's 6 MB) before
  // anything authenticates it, and a sender that trickles it would otherwise hold that memory for ever.
  const server = createServer(
    {
      keepAliveTimeout: 65_000,
      requestTimeout: options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
      // A repeated header reaches the function joined with commas (Node writes ", ", payload 2.0 ","): Node would
      // keep only the first `authorization` or `content-type`, and a call refused on AWS (two keys) be served here.
      joinDuplicateHeaders: true,
      ...(options.checkIntervalMs === undefined
        ? {}
        : { connectionsCheckingInterval: options.checkIntervalMs }),
    },
    (req, res) => {
      served++;
      // A request that arrives on a kept-alive connection while draining is served, and its connection closed.
      if (draining) res.shouldKeepAlive = false;
      const work = (site.handles(req) ? site.serve(req, res) : serve(routes, req, res)).catch(
        (error: unknown) => {
          onError(error);
          if (!res.headersSent) res.writeHead(500).end();
          else res.destroy();
        },
      );
      running.add(work);
      void work.finally(() => {
        running.delete(work);
        if (draining) server.closeIdleConnections();
      });
    },
  );
  /** Waits until no request runs (including ones that arrive meanwhile) or the deadline passes. */
  const settle = async (deadline: number) => {
    while (running.size > 0 && Date.now() < deadline) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled([...running]),
        new Promise((resolve) => {
          timer = setTimeout(resolve, deadline - Date.now());
        }),
      ]);
      clearTimeout(timer);
    }
  };
  return {
    server,
    served: () => served,
    drain: async (graceMs) => {
      draining = true;
      server.close();
      server.closeIdleConnections();
      await settle(Date.now() + graceMs);
      const cut = running.size;
      server.closeAllConnections();
      await settle(Date.now() + CUT_SETTLE_MS);
      return { cut, unfinished: running.size };
    },
  };
};
