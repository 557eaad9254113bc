import { contended } from './transaction-contention.ts';

/** AWS errors that say "not now" rather than "not this". */
const TRANSIENT_NAMES: ReadonlySet<string> = new Set([
  'TimeoutError',
  'RequestTimeout',
  'ThrottlingException',
  'ProvisionedThroughputExceededException',
  'RequestLimitExceeded',
  'TransactionConflictException',
  'InternalServerError',
  'ServiceUnavailable',
  'ServiceUnavailableException',
]);

/** Network failures: nothing answered, or the answer was cut. */
const TRANSIENT_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EAI_AGAIN',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_SOCKET',
]);

/**
 * Whether `error` says an AWS service could not be reached, or was busy, throttled or failing on its side: the same
 * call may succeed when made again. The admin CLI's exit status 75 and the key ring's short wait before reading a
 * secret again both go by it.
 */
export const isTransient = (error: unknown, depth = 0): boolean => {
  if (typeof error !== 'object' || error === null || depth > 4) return false;
  const e = error as {
    name?: unknown;
    code?: unknown;
    cause?: unknown;
    $retryable?: unknown;
    $metadata?: { httpStatusCode?: unknown };
  };
  if (e.$retryable) return true;
  const status = e.$metadata?.httpStatusCode;
  if (typeof status === 'number' && (status >= 500 || status === 429)) return true;
  if (typeof e.name === 'string' && TRANSIENT_NAMES.has(e.name)) return true;
  if (typeof e.code === 'string' && TRANSIENT_CODES.has(e.code)) return true;
  // A transaction another write got in the way of, or throttled (its reasons say so): it may pass when run again.
  const reasons = (error as { CancellationReasons?: { Code?: string }[] }).CancellationReasons;
  if (Array.isArray(reasons) && contended(reasons)) return true;
  // Node's connection attempts to every address of a host fail together as one AggregateError.
  if (error instanceof AggregateError && error.errors.some((inner) => isTransient(inner, depth + 1)))
    return true;
  return isTransient(e.cause, depth + 1);
};
