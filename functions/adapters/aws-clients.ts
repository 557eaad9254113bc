import type { DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import type { Logger } from './logger.ts';

/**
 * Settings for the AWS SDK clients on hot paths (the request path's DynamoDB and SQS clients, the settlement
 * sender and consumer), on AWS and locally alike:
 *
 * - `logger`: the SDK's default (a no-op logger) still has `info`, and the SDK's logger middleware builds a redacted
 *   copy of every command's input and output for it — a walk of both through the schema on every call, the
 *   admission transaction included. Without `info` and `error` (the SDK only ever calls them as
 *   `logger?.info?.(…)`), that work is skipped. The SDK's warnings still reach `log` when one is given (the local
 *   settlement sender has none: its failures come back to the host as refused records).
 * - `cacheMiddleware`: the middleware stack is resolved once per command class rather than on every `send` (sorting
 *   and wiring the same dozen middlewares each time); nothing here adds middleware per call.
 *
 * Measured on a DynamoDB `TransactWriteItems` against a stub answering `{}` at once: 0.84 ms of CPU per call with
 * the defaults, 0.63 with the logger, 0.58 with both.
 */
export const hotPathClientConfig = (log?: Logger) => ({
  cacheMiddleware: true,
  logger: {
    debug: () => {},
    trace: () => {},
    warn: (...content: unknown[]) => log?.warn('aws sdk warning', { content }),
  } as unknown as DynamoDBClientConfig['logger'],
});

/**
 * Time limits on each attempt of a call to DynamoDB, SQS or Secrets Manager on a request's path. The SDK sets none
 * by default: a store that stops answering without refusing connections (a network black hole, a brown-out) would
 * hold every request until its function's own timeout (15 minutes for chat) — no 503, no response at all, and a
 * Lambda instance held per call. With these an unanswered attempt fails, is retried as the client's `maxAttempts`
 * allows, and the request is refused with 503 within seconds: fail closed, and fast. Generous against the
 * milliseconds a healthy store takes (DynamoDB Local's p99 under the bench's load is tens of ms). Off the request
 * path the usage report's DynamoDB and S3 clients and the local host's settlement sender use them too, so that a
 * run or a send ends with an error rather than at its function's timeout. Not for SQS long polls, which wait up to
 * 20 s on purpose.
 */
export const STORE_CALL_TIMEOUTS = { connectionTimeout: 2_000, requestTimeout: 5_000 } as const;

/**
 * `STORE_CALL_TIMEOUTS` as a client's `requestHandler` setting. The handler only warns when a request outlives its
 * timeout unless told to throw.
 */
export const boundedRequests = () => ({
  requestHandler: { ...STORE_CALL_TIMEOUTS, throwOnRequestTimeout: true },
});
