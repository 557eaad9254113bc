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
