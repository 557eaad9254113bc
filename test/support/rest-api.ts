import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { APIGatewayProxyEvent } from 'aws-lambda';
import type { Container } from '#functions/container.ts';
import { REST_BINARY_MEDIA_TYPES } from '#lib/functions.ts';
import { invocationContext, invokeStreaming, readBody } from '#local/function-url.ts';
import type { StreamingHandler } from '#local/lambda-runtime.ts';

/**
 * On AWS, CloudFront's `/v1/*` reaches the functions through API Gateway's REST API, whose streaming integrations
 * send the payload-1.0 event (headers as the client cased them, `path`, `httpMethod`). The local host serves
 * Function URL events only; this serves the real handlers behind 1.0 events instead.
 */
/** Whether API Gateway would treat a body of this Content-Type as binary (the stack's binaryMediaTypes). */
const isBinaryMediaType = (contentType: string): boolean => {
  const type = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  return REST_BINARY_MEDIA_TYPES.some((pattern) => {
    const [main, sub] = pattern.split('/');
    return (main === '*' || type.startsWith(`${main}/`)) && (sub === '*' || type.endsWith(`/${sub}`));
  });
};

export const restEvent = (req: IncomingMessage, body: Buffer): APIGatewayProxyEvent => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const headers: Record<string, string> = {};
  const multiValueHeaders: Record<string, string[]> = {};
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i] as string;
    const value = req.rawHeaders[i + 1] as string;
    headers[name] = value;
    multiValueHeaders[name] = [...(multiValueHeaders[name] ?? []), value];
  }
  const binary = isBinaryMediaType(req.headers['content-type'] ?? '');
  return {
    resource: '/{proxy+}',
    path: url.pathname,
    httpMethod: req.method ?? 'GET',
    headers,
    multiValueHeaders,
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: null,
    stageVariables: null,
    // As API Gateway does: base64 for a body whose Content-Type is one of the API's binary media types, else text.
    body: body.length === 0 ? null : binary ? body.toString('base64') : body.toString('utf8'),
    isBase64Encoded: body.length > 0 && binary,
    requestContext: {
      accountId: '123456789012',
      apiId: 'rest',
      httpMethod: req.method ?? 'GET',
      identity: { sourceIp: '127.0.0.1', userAgent: headers['User-Agent'] ?? '' },
      path: `/prod${url.pathname}`,
      protocol: 'HTTP/1.1',
      requestId: crypto.randomUUID(),
      requestTimeEpoch: Date.now(),
      resourceId: 'r',
      resourcePath: '/{proxy+}',
      stage: 'prod',
    },
  } as unknown as APIGatewayProxyEvent;
};

export interface RestApi {
  /** Base URL, ending in `/v1`. */
  readonly baseURL: string;
  close(): Promise<void>;
}

/**
 * A loopback server standing in for the REST API in front of the models and chat functions, each invocation
 * given `timeoutMs` as its function's timeout.
 */
export const startRestApi = async (
  container: () => Container,
  options: { timeoutMs?: number } = {},
): Promise<RestApi> => {
  const handlers: Record<string, StreamingHandler> = {
    '/v1/models': (await import('#functions/models.ts')).createHandler(
      container,
    ) as unknown as StreamingHandler,
    '/v1/chat/completions': (await import('#functions/chat-completions.ts')).createHandler(
      container,
    ) as unknown as StreamingHandler,
  };
  const server: Server = createServer(async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const handler = handlers[path.startsWith('/v1/models') ? '/v1/models' : path];
    const body = (await readBody(req, 1 << 20)) ?? Buffer.alloc(0);
    if (!handler) return void res.writeHead(404).end();
    const context = invocationContext('rest', options.timeoutMs ?? 60_000);
    await invokeStreaming(handler, restEvent(req, body) as never, context, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
};
