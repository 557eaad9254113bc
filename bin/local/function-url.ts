import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { APIGatewayProxyEventV2, Context } from 'aws-lambda';
import { LAMBDA_PAYLOAD_LIMIT_BYTES } from '#functions/config.ts';
import { LambdaResponseStream, type StreamingHandler } from './lambda-runtime.ts';

/** Lambda's own limit on an invocation's request payload (Function URLs included). */
export const LAMBDA_REQUEST_LIMIT_BYTES = LAMBDA_PAYLOAD_LIMIT_BYTES;

/** Content types a Function URL passes as text; everything else arrives base64-encoded, as on AWS. */
const TEXT_TYPES = /^(?:text\/|application\/(?:json|[\w.+-]+\+json|x-www-form-urlencoded|xml|javascript))/i;

/** Reads the request body, stopping at `limit` bytes (null when over it). */
export const readBody = (req: IncomingMessage, limit: number): Promise<Buffer | null> =>
  new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        resolve(null);
        req.resume();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () =>
      resolve(size > limit ? null : chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks)),
    );
    req.on('error', reject);
  });

/** The payload-v2 event a Function URL would deliver for this request. */
export const functionUrlEvent = (req: IncomingMessage, body: Buffer): APIGatewayProxyEventV2 => {
  // The request target split by hand, not parsed as a WHATWG URL (that parse, once per request, showed up in
  // the host's profile under load): rawPath is the path as the client sent it.
  const target = req.url ?? '/';
  const mark = target.indexOf('?');
  const rawPath = mark === -1 ? target : target.slice(0, mark);
  const rawQuery = mark === -1 ? '' : target.slice(mark + 1);
  const headers: Record<string, string> = {};
  let cookies: string[] | undefined;
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined) continue;
    if (name === 'cookie') cookies = (Array.isArray(value) ? value.join('; ') : value).split(/;\s*/);
    else headers[name] = Array.isArray(value) ? value.join(',') : value;
  }
  const now = new Date();
  // A compressed body is binary whatever its content type says its decoded form is.
  const encoding = headers['content-encoding']?.trim().toLowerCase();
  const text =
    (!encoding || encoding === 'identity') && TEXT_TYPES.test(headers['content-type'] ?? 'application/json');
  const event: APIGatewayProxyEventV2 = {
    version: '2.0',
    routeKey: '$default',
    rawPath,
    rawQueryString: rawQuery,
    headers,
    requestContext: {
      accountId: 'anonymous',
      apiId: 'local',
      domainName: headers.host ?? 'localhost',
      domainPrefix: (headers.host ?? 'localhost').split('.')[0] ?? 'localhost',
      http: {
        method: req.method ?? 'GET',
        path: rawPath,
        protocol: `HTTP/${req.httpVersion}`,
        sourceIp: req.socket.remoteAddress ?? '127.0.0.1',
        userAgent: headers['user-agent'] ?? '',
      },
      requestId: randomUUID(),
      routeKey: '$default',
      stage: '$default',
      time: now.toISOString(),
      timeEpoch: now.getTime(),
    },
    isBase64Encoded: body.length > 0 && !text,
  };
  if (cookies) event.cookies = cookies;
  if (rawQuery) event.queryStringParameters = queryParameters(rawQuery);
  if (body.length > 0) event.body = text ? body.toString('utf8') : body.toString('base64');
  return event;
};

/** Repeated parameters join with commas, as a Function URL delivers them. */
const queryParameters = (rawQuery: string): Record<string, string> => {
  const query: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(rawQuery))
    query[k] = query[k] === undefined ? v : `${query[k]},${v}`;
  return query;
};

/** A fresh invocation context, like the runtime's (`awsRequestId` is unique per invocation). */
export const invocationContext = (functionName: string, timeoutMs: number): Context => {
  const deadline = Date.now() + timeoutMs;
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:us-east-1:000000000000:function:${functionName}`,
    memoryLimitInMB: '1024',
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: 'local',
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
};

/**
 * Invokes a response-streaming handler for one HTTP exchange. A client that disconnects early destroys the
 * response stream, which is what the handler would see on Lambda. Resolves when the invocation is over —
 * including work the handler does after its response has ended.
 */
export const invokeStreaming = async (
  handler: StreamingHandler,
  event: APIGatewayProxyEventV2,
  context: Context,
  res: ServerResponse,
): Promise<void> => {
  const stream = new LambdaResponseStream(res);
  // The handler learns of a hang-up through its own writes (and middy's pipeline, which listens for errors);
  // until it writes — while it authenticates, admits, or waits for the upstream's first byte — nothing else
  // listens, and an 'error' without a listener would take the whole host down. Lambda abandons the response
  // just as quietly.
  stream.on('error', () => {});
  let hungUp = false;
  const onClose = () => {
    if (res.writableFinished) return;
    hungUp = true;
    stream.destroy(new Error('client disconnected'));
  };
  res.once('close', onClose);
  try {
    await handler(event, stream, context);
    if (!stream.writableEnded) stream.end();
  } catch (error) {
    // Like a Function URL after an unhandled invocation error: 502 if nothing was sent yet.
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ message: 'Internal Server Error' }));
    } else if (!res.writableEnded) res.destroy();
    // The client's hang-up surfaces as whatever the handler's next write ran into; it is not a failure of ours.
    if (!hungUp && !isPrematureClose(error)) throw error;
  } finally {
    res.off('close', onClose);
  }
};

const isPrematureClose = (error: unknown): boolean =>
  error instanceof Error && (error as NodeJS.ErrnoException).code === 'ERR_STREAM_PREMATURE_CLOSE';
